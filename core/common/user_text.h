#pragma once
// Text a user gave (a scenario name, a JSON key, a CSV cell, a file path), made safe to print on
// a terminal or in a one-line error.
//
// NOTE [Printing user text]: anything printed that came from a file or the command line may
// hold control characters (an ANSI escape in a scenario name recolours or clears the user's
// terminal; a newline splits a one-line error that scripts match on), bytes that are not UTF-8
// (a binary CSV cell) or megabytes (a 2 MB name). printable() is the one place that handles
// all three: InputError applies it to every part of its message, and the CLI applies it to
// the names and paths its summaries echo.
#include <cstddef>
#include <string>
#include <string_view>

namespace fullshard {

// `s` with C0 controls, DEL and C1 controls escaped (\n, \t, \r, \x1b, \u009b) and every byte
// that is not part of valid UTF-8 escaped as \xNN; longer than `max_bytes` after escaping, it
// is cut at a character boundary and ends in "... (N bytes)" where N is the original size.
// Printable ASCII and valid UTF-8 pass unchanged; a backslash is not escaped, so applying
// printable() twice changes nothing more.
inline constexpr size_t kDefaultPrintable = 200;
std::string printable(std::string_view s, size_t max_bytes = kDefaultPrintable);

}  // namespace fullshard
