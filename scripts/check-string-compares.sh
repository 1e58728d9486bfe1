#!/usr/bin/env bash
# Values are told apart by type, not by text. Fails when
#   - any source compares an error's text (Error::message(), ::what, ::where) against anything: code asks
#     Error::kind instead (support/expected.hpp). A line that reads `where` as a place (rewriting a
#     path, matching an op's label) says "a place, not a meaning";
#   - the sources of sim/, tools/ and calibrate/ hold 15 or more comparisons (== or !=) against a string literal:
#     an enum's spellings live in one table (EnumName, support/enum_names.hpp) and parse_enum reads it.
#   - a library (every folder but tools/ and python/, which own the flags) spells a flag where an error
#     names the field it is about: it says Error{Field::Seq, ...}, and support/field.hpp holds the spellings.
# The comparisons left are spellings of formats other programs write (an nccl-tests header, a CSV's byte-order
# mark, the command's own first argument); the script lists them.
set -euo pipefail
cd "$(dirname "$0")/.."
limit=15
sources() { git ls-files "$@" | grep -E '\.(cpp|hpp|cu|cuh|h|in)$'; }

on_text=$(sources 'scheduler/*' 'sim/*' 'tools/*' 'calibrate/*' 'runtime/*' 'topologies/*' 'python/*' |
  xargs grep -nE '(\.message\(\)|\.what|\.where)[[:space:]]*(==|!=|\.find\(|\.rfind\(|\.starts_with\(|\.compare\()|(==|!=)[[:space:]]*[a-z_.()]*\.(message\(\)|what|where)\b' | grep -v 'a place, not a meaning' || true)
if [[ -n $on_text ]]; then
  echo "check-string-compares: code branches on an error's text (give the error a kind, ask Error::kind):" >&2
  echo "$on_text" >&2
  exit 1
fi

flags=$(sources 'support/*' 'scheduler/*' 'sim/*' 'calibrate/*' 'runtime/*' 'topologies/*' |
  xargs grep -nE 'Error\{"--|Error\{std::string\("--' || true)
if [[ -n $flags ]]; then
  echo "check-string-compares: a library spells a flag in an error (name the field: Error{Field::..., ...}):" >&2
  echo "$flags" >&2
  exit 1
fi

literal='(==|!=)[[:space:]]*"|"[[:space:]]*(==|!=)'
lines=$(sources 'sim/*' 'tools/*' 'calibrate/*' | xargs grep -nE "$literal" || true)
count=$(printf '%s\n' "$lines" | grep -oE "$literal" | wc -l)
if ((count >= limit)); then
  echo "check-string-compares: $count comparisons against string literals in sim/, tools/ and calibrate/ (at most $((limit - 1))); parse into an enum with a table of its spellings instead:" >&2
  echo "$lines" >&2
  exit 1
fi
echo "check-string-compares: no comparison on an error's text, no flag spelt by a library; $count comparisons against string literals in sim/, tools/ and calibrate/ (limit $((limit - 1))):"
printf '%s\n' "$lines" | sed 's/^/  /'
