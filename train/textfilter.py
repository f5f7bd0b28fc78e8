"""The noise filter both stages see: Python twin of classifier.FilterNoise in Go.

Real prompts carry words that say nothing about whether a request is fast or slow:
ticket numbers, reference tags, URLs, e-mail addresses, paths, code identifiers. The
filter drops them from the instruction before it is tokenized, so the static first stage,
MiniLM and the gateway's decision cache all see the same instruction without them.

A word is a run of characters between whitespace (Go's unicode.IsSpace set). A word is
noise when it

- holds an ASCII digit (numbers, ids, hex, uuids, versions, dates, `#4821`);
- holds `://` or `www.` (ASCII case-insensitive): a URL;
- holds `@` after its first character with a `.` after that: an e-mail address;
- is a path: starts with `/`, `~/`, `./` or `../` (and is longer than `/`), holds a
  backslash, or holds two or more `/`;
- looks like code: holds `_`, `=`, `{`, `}` or `::`, or an ASCII letter directly followed by `(`
  (`print(`, `camelCase(`; also `friend(s)`, a known casualty).

A bracketed tag is dropped whole: a word that starts with `(` or `[` and the first word
at most 7 words on whose end (before trailing `.,;:!?`) closes it, when the group holds
at least one noise word and at most one other word (a label such as `ref` or `build`).

Version 2 (`noise_words_v2`, the default) also drops a trailer: what follows the text's
last sentence when it is at most 8 words (as long as a bracketed tag may be), holds a word
dropped above and at most 3 words kept
(`... in Paris? order 123456789`, `... this. [build 3fa9b2c] ERROR at line 42`, `... uuid
d9653b8f-...`): the label left beside an identifier that an application or a tool appended.
The last sentence ends at the last word, other than the text's final one, that the rules
above keep and that ends with `?`, `!` or `.`, once closing quotes and brackets
(`"')]` and U+201D, U+2019) are trimmed from it; a `.` ends one only after at least 4
characters holding no other `.` (so `vs.`, `No.`, `U.S.`, `e.g.` do not). A text without
such an ending has no trailer. Version 1 (`noise_words_v1`) is the filter without it, for
models exported before it.

Kept words are byte-identical, re-joined with one ASCII space (the tokenizer splits on
whitespace, so the word pieces are the same as with the original spacing). When nothing
is dropped the text is returned unchanged; when everything would be, too (the original
is classified as it is). Only ASCII digits count: other scripts' digits are kept.
"""

# Go's unicode.IsSpace: Latin-1 spaces plus the White_Space property. (Python's str.split
# also splits on \x1c-\x1f, which Go does not, so the set is spelled out.)
_SPACE = frozenset("\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009"
                   "\u200a\u2028\u2029\u202f\u205f\u3000")
_OPEN = {"(": ")", "[": "]"}
_TRAIL = ".,;:!?"
_GROUP_MAX = 8  # words in a bracketed tag, the opening and closing ones included
_TRAILER_KEPT = 3  # words a trailer may hold besides the dropped ones
_CLOSERS = "\"')]\u201d\u2019"

NOISE_WORDS_V1, NOISE_WORDS_V2 = "noise_words_v1", "noise_words_v2"
NOISE_FILTER = NOISE_WORDS_V2  # the version the notebook trains behind and names in the manifest


def _words(s):
    out, start = [], -1
    for i, ch in enumerate(s):
        if ch in _SPACE:
            if start >= 0:
                out.append(s[start:i])
                start = -1
        elif start < 0:
            start = i
    if start >= 0:
        out.append(s[start:])
    return out


def _is_letter_ascii(ch):
    return ("a" <= ch <= "z") or ("A" <= ch <= "Z")


def _ascii_lower(w):
    return "".join(chr(ord(c) + 32) if "A" <= c <= "Z" else c for c in w)


def is_noise(w):
    """Whether one whitespace-delimited word carries no routing meaning (see the module doc)."""
    if any("0" <= c <= "9" for c in w):
        return True
    if "://" in w or "www." in _ascii_lower(w):
        return True
    at = w.find("@")
    if at > 0 and "." in w[at + 1:]:
        return True
    if (w.startswith(("/", "~/", "./", "../")) and w != "/") or "\\" in w or w.count("/") >= 2:
        return True
    if any(c in w for c in "_={}") or "::" in w:
        return True
    for i in range(1, len(w)):
        if w[i] == "(" and _is_letter_ascii(w[i - 1]):
            return True
    return False


def _closes(w, opener):
    return w.rstrip(_TRAIL).endswith(_OPEN[opener])


def _ends_sentence(w):
    w = w.rstrip(_CLOSERS)
    if w.endswith(("?", "!")):
        return True
    return w.endswith(".") and len(w) >= 5 and "." not in w[:-1]


def filter_noise(s, version=NOISE_FILTER):
    """s without its noise words (see the module doc); s itself when none or all of them are."""
    if version not in (NOISE_WORDS_V1, NOISE_WORDS_V2):
        raise ValueError(f"unknown noise filter {version!r}")
    words = _words(s)
    noise = [is_noise(w) for w in words]
    drop = list(noise)
    i = 0
    while i < len(words):
        w = words[i]
        if w[:1] in _OPEN and not _closes(w[1:], w[0]):
            for j in range(i + 1, min(i + _GROUP_MAX, len(words))):
                if _closes(words[j], w[0]):
                    n_noise = sum(noise[i:j + 1])
                    if n_noise >= 1 and (j + 1 - i) - n_noise <= 1:
                        for k in range(i, j + 1):
                            drop[k] = True
                        i = j
                    break
        i += 1
    if version == NOISE_WORDS_V2 and any(drop):
        end = next((k for k in range(len(words) - 2, -1, -1) if not drop[k] and _ends_sentence(words[k])), None)
        if (end is not None and len(words) - end - 1 <= _GROUP_MAX and any(drop[end + 1:])
                and drop[end + 1:].count(False) <= _TRAILER_KEPT):
            for k in range(end + 1, len(words)):
                drop[k] = True
    if not any(drop) or all(drop):
        return s
    return " ".join(w for w, d in zip(words, drop) if not d)
