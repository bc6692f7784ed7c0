#include "tokenizer/jinja_lexer.h"

#include <algorithm>
#include <array>

#include "common/error.h"
#include "tokenizer/utf8.h"

namespace mlaserve::jinja {
namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }
int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Longest operators first, so "//" wins over "/" and "**" over "*".
constexpr std::array<std::string_view, 26> kOperators = {
    "//", "**", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%", "~", "[", "]", "(", ")",
    "{",  "}",  ">",  "<",  "=",  ".",  ":", "|", ",", ";"};

// Python's "unicode-escape" decoding of a string literal body, after Jinja has turned every
// non-ASCII character into its \x, \u or \U escape ("backslashreplace").
std::string unescape_string(std::string_view body, int line) {
  std::string ascii;
  for (size_t pos = 0; pos < body.size();) {
    const auto byte = static_cast<unsigned char>(body[pos]);
    if (byte < 0x80) {
      ascii.push_back(body[pos++]);
      continue;
    }
    const char32_t c = utf8::next(body, pos);
    ascii += c < 0x100 ? fmt::format("\\x{:02x}", uint32_t(c))
             : c < 0x10000 ? fmt::format("\\u{:04x}", uint32_t(c))
                           : fmt::format("\\U{:08x}", uint32_t(c));
  }
  std::string out;
  for (size_t i = 0; i < ascii.size(); ++i) {
    if (ascii[i] != '\\' || i + 1 == ascii.size()) {
      out.push_back(ascii[i]);
      continue;
    }
    const char e = ascii[++i];
    auto hex_escape = [&](int digits) {
      uint32_t value = 0;
      for (int d = 0; d < digits; ++d) {
        const int h = i + 1 + d < ascii.size() ? hex_value(ascii[i + 1 + d]) : -1;
        MLA_CHECK(h >= 0, "chat template line {}: truncated \\{} escape in a string", line, e);
        value = value * 16 + uint32_t(h);
      }
      MLA_CHECK(value <= 0x10FFFF, "chat template line {}: escape out of range", line);
      i += digits;
      utf8::append(out, value);
    };
    switch (e) {
      case '\n': break;  // a backslash at the end of a line continues it
      case '\\': out.push_back('\\'); break;
      case '\'': out.push_back('\''); break;
      case '"': out.push_back('"'); break;
      case 'a': out.push_back('\a'); break;
      case 'b': out.push_back('\b'); break;
      case 'f': out.push_back('\f'); break;
      case 'n': out.push_back('\n'); break;
      case 'r': out.push_back('\r'); break;
      case 't': out.push_back('\t'); break;
      case 'v': out.push_back('\v'); break;
      case 'x': hex_escape(2); break;
      case 'u': hex_escape(4); break;
      case 'U': hex_escape(8); break;
      case 'N': fail("chat template line {}: \\N{{...}} escapes are not supported", line);
      default:
        if (e >= '0' && e <= '7') {
          uint32_t value = uint32_t(e - '0');
          for (int d = 0; d < 2 && i + 1 < ascii.size() && ascii[i + 1] >= '0' && ascii[i + 1] <= '7'; ++d) {
            value = value * 8 + uint32_t(ascii[++i] - '0');
          }
          utf8::append(out, value);
        } else {
          out.push_back('\\');  // unknown escapes stay as written
          out.push_back(e);
        }
    }
  }
  return out;
}

class Lexer {
 public:
  explicit Lexer(std::string_view source) {
    // Jinja splits the source on \r\n, \r and \n, drops a final empty line (keep_trailing_newline
    // is off) and joins with \n.
    for (size_t i = 0; i < source.size(); ++i) {
      if (source[i] == '\r') {
        src_.push_back('\n');
        if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
      } else {
        src_.push_back(source[i]);
      }
    }
    if (!src_.empty() && src_.back() == '\n') src_.pop_back();
  }

  std::vector<Token> run() {
    while (pos_ < src_.size()) lex_root();
    out_.push_back({TokenType::kEnd, "", line_});
    return std::move(out_);
  }

 private:
  [[noreturn]] void error(std::string_view what) const { fail("chat template line {}: {}", line_, what); }

  void emit(TokenType type, std::string text) { out_.push_back({type, std::move(text), line_}); }

  void advance_to(size_t pos) {
    line_ += int(std::count(src_.begin() + long(pos_), src_.begin() + long(pos), '\n'));
    pos_ = pos;
  }

  bool at(std::string_view s, size_t pos) const { return src_.compare(pos, s.size(), s) == 0; }

  // Python's \s* starting at pos: returns the position after the run.
  size_t skip_space(size_t pos) const {
    while (pos < src_.size()) {
      size_t next = pos;
      if (!python_isspace(utf8::next(src_, next))) break;
      pos = next;
    }
    return pos;
  }

  // Applies the "-" / lstrip_blocks rules to text that precedes a tag, then emits it.
  void emit_text(std::string_view text, char sign, bool lstrip_allowed) {
    std::string data(text);
    if (sign == '-') {
      size_t end = data.size();
      while (end > 0) {
        size_t start = end - 1;
        while (start > 0 && (uint8_t(data[start]) & 0xC0) == 0x80) --start;
        size_t p = start;
        if (!python_isspace(utf8::next(data, p))) break;
        end = start;
      }
      data.resize(end);
    } else if (sign != '+' && lstrip_allowed) {
      // Only white space between the last line break (or a line start) and the tag: drop it.
      const size_t line_begin = data.rfind('\n') == std::string::npos ? 0 : data.rfind('\n') + 1;
      if ((line_begin > 0 || line_starting_) && line_begin < data.size()) {
        bool blank = true;
        for (size_t p = line_begin; p < data.size() && blank;) blank = python_isspace(utf8::next(data, p));
        if (blank) data.resize(line_begin);
      }
    }
    if (!data.empty()) emit(TokenType::kText, std::move(data));
  }

  void lex_root() {
    size_t tag = pos_;
    while (true) {
      tag = src_.find('{', tag);
      if (tag == std::string::npos || tag + 1 >= src_.size()) {
        emit_text(std::string_view(src_).substr(pos_), 0, false);
        advance_to(src_.size());
        return;
      }
      const char kind = src_[tag + 1];
      if (kind == '{' || kind == '%' || kind == '#') break;
      ++tag;
    }
    const char kind = src_[tag + 1];
    const char sign = tag + 2 < src_.size() && (src_[tag + 2] == '-' || src_[tag + 2] == '+') ? src_[tag + 2] : 0;
    size_t after = tag + 2 + (sign ? 1 : 0);

    // {% raw %} is recognised before ordinary statements; its closing %} trims no newline.
    if (kind == '%') {
      size_t p = skip_space(after);
      if (at("raw", p)) {
        p = skip_space(p + 3);
        size_t end = std::string::npos;
        if (at("-%}", p)) end = skip_space(p + 3);
        else if (at("%}", p)) end = p + 2;
        if (end != std::string::npos) {
          emit_text(std::string_view(src_).substr(pos_, tag - pos_), sign, true);
          advance_to(end);
          line_starting_ = end > 0 && src_[end - 1] == '\n';
          lex_raw_body();
          return;
        }
      }
    }
    emit_text(std::string_view(src_).substr(pos_, tag - pos_), sign, kind != '{');
    advance_to(after);
    line_starting_ = false;
    if (kind == '#') {
      lex_comment();
    } else {
      lex_tag(kind == '{');
    }
  }

  // After the end of a tag: "+" keeps what follows, "-" eats white space, a plain end of a
  // statement or comment eats one newline (trim_blocks).
  void finish_tag(size_t marker, size_t marker_length, bool trims_newline) {
    size_t end = marker + marker_length;
    const char sign = src_[marker];
    if (sign == '-') {
      end = skip_space(end);
    } else if (sign != '+' && trims_newline && end < src_.size() && src_[end] == '\n') {
      ++end;
    }
    advance_to(end);
    line_starting_ = src_[end - 1] == '\n';
  }

  void lex_comment() {
    const size_t close = src_.find("#}", pos_);
    if (close == std::string::npos) error("missing end of comment tag");
    const bool signed_end = close > pos_ && (src_[close - 1] == '-' || src_[close - 1] == '+');
    if (signed_end) {
      finish_tag(close - 1, 3, true);
    } else {
      advance_to(close);
      finish_tag(close, 2, true);
    }
  }

  void lex_raw_body() {
    for (size_t search = pos_;;) {
      const size_t open = src_.find("{%", search);
      if (open == std::string::npos) error("missing end of raw directive");
      const char sign = open + 2 < src_.size() && (src_[open + 2] == '-' || src_[open + 2] == '+') ? src_[open + 2] : 0;
      size_t p = skip_space(open + 2 + (sign ? 1 : 0));
      if (at("endraw", p)) {
        p = skip_space(p + 6);
        if (at("+%}", p) || at("-%}", p) || at("%}", p)) {
          emit_text(std::string_view(src_).substr(pos_, open - pos_), sign, true);
          advance_to(p);
          finish_tag(p, src_[p] == '%' ? 2 : 3, true);
          return;
        }
      }
      search = open + 2;
    }
  }

  void lex_tag(bool print) {
    emit(print ? TokenType::kPrintBegin : TokenType::kBlockBegin, "");
    std::vector<char> balance;
    while (true) {
      if (pos_ >= src_.size()) error(print ? "missing }}" : "missing %}");
      if (balance.empty()) {
        if (print) {
          if (at("-}}", pos_)) { emit(TokenType::kPrintEnd, ""); return finish_tag(pos_, 3, false); }
          if (at("}}", pos_)) { emit(TokenType::kPrintEnd, ""); return finish_tag(pos_, 2, false); }
        } else {
          if (at("+%}", pos_) || at("-%}", pos_)) { emit(TokenType::kBlockEnd, ""); return finish_tag(pos_, 3, true); }
          if (at("%}", pos_)) { emit(TokenType::kBlockEnd, ""); return finish_tag(pos_, 2, true); }
        }
      }
      const size_t space_end = skip_space(pos_);
      if (space_end != pos_) {
        advance_to(space_end);
        continue;
      }
      const char c = src_[pos_];
      if (is_digit(c)) {
        lex_number();
      } else if (is_name_start(c)) {
        size_t end = pos_;
        while (end < src_.size() && is_name_char(src_[end])) ++end;
        emit(TokenType::kName, src_.substr(pos_, end - pos_));
        advance_to(end);
      } else if (c == '\'' || c == '"') {
        lex_string(c);
      } else {
        lex_operator(balance);
      }
    }
  }

  size_t digits_end(size_t pos) const {
    // (\d+_)*\d+
    size_t end = pos;
    while (end < src_.size() && (is_digit(src_[end]) || (src_[end] == '_' && end + 1 < src_.size() && is_digit(src_[end + 1]) && end > pos))) ++end;
    return end;
  }

  void lex_number() {
    const size_t start = pos_;
    size_t end = digits_end(start);
    bool is_float = false;
    if (end + 1 < src_.size() && src_[end] == '.' && is_digit(src_[end + 1]) &&
        !(start > 0 && src_[start - 1] == '.')) {
      end = digits_end(end + 1);
      is_float = true;
    }
    if (end < src_.size() && (src_[end] == 'e' || src_[end] == 'E')) {
      size_t p = end + 1;
      if (p < src_.size() && (src_[p] == '+' || src_[p] == '-')) ++p;
      if (p < src_.size() && is_digit(src_[p])) {
        end = digits_end(p);
        is_float = true;
      }
    }
    std::string text = src_.substr(start, end - start);
    std::erase(text, '_');
    emit(is_float ? TokenType::kFloat : TokenType::kInteger, std::move(text));
    advance_to(end);
  }

  void lex_string(char quote) {
    size_t end = pos_ + 1;
    while (end < src_.size() && src_[end] != quote) end += src_[end] == '\\' ? 2 : 1;
    if (end >= src_.size()) error("unterminated string");
    const std::string_view body = std::string_view(src_).substr(pos_ + 1, end - pos_ - 1);
    emit(TokenType::kString, unescape_string(body, line_));
    advance_to(end + 1);
  }

  void lex_operator(std::vector<char>& balance) {
    for (std::string_view op : kOperators) {
      if (!at(op, pos_)) continue;
      const char c = op[0];
      if (op.size() == 1 && (c == '(' || c == '[' || c == '{')) {
        balance.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
      } else if (op.size() == 1 && (c == ')' || c == ']' || c == '}')) {
        if (balance.empty() || balance.back() != c) error(fmt::format("unexpected '{}'", c));
        balance.pop_back();
      }
      emit(TokenType::kOperator, std::string(op));
      advance_to(pos_ + op.size());
      return;
    }
    error(fmt::format("unexpected character {:?}", src_.substr(pos_, 1)));
  }

  std::string src_;
  size_t pos_ = 0;
  int line_ = 1;
  bool line_starting_ = true;
  std::vector<Token> out_;
};

}  // namespace

bool python_isspace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
         c == 0x202F || c == 0x205F || c == 0x3000;
}

std::vector<Token> tokenize(std::string_view source) {
  utf8::require_valid(source, "chat template");
  return Lexer(source).run();
}

}  // namespace mlaserve::jinja
