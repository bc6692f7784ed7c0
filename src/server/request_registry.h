// RequestRegistry: the requests in flight by their rid (a request's "rid", else one the server
// makes), so that /abort_request can stop them as SGLang's does. Entries hold the requests'
// channels weakly: a request that ended drops out by itself.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/request.h"

namespace mlaserve {

class RequestRegistry {
 public:
  // Registers the channels of one rid (its n samples); false when that rid is still in flight.
  bool add(const std::string& rid, const std::vector<std::shared_ptr<OutputChannel>>& channels);
  void remove(const std::string& rid);
  // Cancels the requests of `rid` (Abort); returns how many it reached (0: unknown or ended).
  size_t abort(const std::string& rid);
  size_t abort_all();

 private:
  using Channels = std::vector<std::weak_ptr<OutputChannel>>;
  static size_t cancel(const Channels& channels);
  static bool ended(const Channels& channels);
  void purge_ended();  // caller holds mu_

  std::mutex mu_;
  std::unordered_map<std::string, Channels> by_rid_;
  size_t purge_at_ = 64;  // purge when the map grows past this (streams leave their entries behind)
};

// The rids one handler registered: removed when it returns, unless keep() hands them to a stream
// (they then expire with its requests).
class RegisteredRids {
 public:
  explicit RegisteredRids(RequestRegistry& registry) : registry_(registry) {}
  ~RegisteredRids() {
    if (!kept_)
      for (const std::string& rid : rids_) registry_.remove(rid);
  }
  RegisteredRids(const RegisteredRids&) = delete;
  RegisteredRids& operator=(const RegisteredRids&) = delete;
  bool add(const std::string& rid, const std::vector<std::shared_ptr<OutputChannel>>& channels) {
    if (!registry_.add(rid, channels)) return false;
    rids_.push_back(rid);
    return true;
  }
  void keep() { kept_ = true; }

 private:
  RequestRegistry& registry_;
  std::vector<std::string> rids_;
  bool kept_ = false;
};

// A random rid, 32 hex digits (as SGLang's uuid4().hex).
std::string new_rid();

}  // namespace mlaserve
