"""What `tailscale serve` puts in its identity headers, byte for byte, and how a login is
read from them.

serve sets Tailscale-User-Login to `encTailscaleHeaderValue(LoginName)`
(ipn/ipnlocal/serve.go): invalid UTF-8 becomes "", ASCII passes through unchanged, and
anything else becomes RFC 2047 Q encoded words (Go's `mime.QEncoding.Encode("utf-8", v)`).
So the encoding is not one-to-one: a tailnet user whose login is literally
`=?utf-8?q?owner?=@x.test` arrives exactly as written, and decoding it would make them
`owner@x.test`. The access decision therefore never decodes. It compares the header as
sent with what serve would send for each configured login; decoding is for display only.
"""

from __future__ import annotations

import base64
import binascii
import re

from app.config import ascii_lower
from app.errors import Denied
from app.web.auth.tailscaled import clean_name

# Go's mime package: an encoded word is at most 75 characters, and "=?UTF-8?q?" + "?="
# leave 63 for the text. Words are split between characters, never inside one.
MAX_WORD_TEXT = 75 - len("=?UTF-8?q?") - len("?=")
WORD = re.compile(r"=\?([^?\s]+)\?([qQbB])\?([^?\s]*)\?=")
# One or more encoded words separated by single spaces, as Go's encoder writes them.
ENCODED_WORDS = re.compile(rf"{WORD.pattern}(?: {WORD.pattern})*")
QHEX = re.compile(r"=([0-9A-Fa-f]{2})")


def _q_piece(ch: str) -> str:
    # Go's qEncode: printable ASCII but = ? _ stands for itself, a space is "_", every
    # other byte of the character's UTF-8 is =XX with upper-case hex.
    if ch == " ":
        return "_"
    if "!" <= ch <= "~" and ch not in "=?_":
        return ch
    return "".join(f"={byte:02X}" for byte in ch.encode("utf-8"))


def serve_header_value(value: str) -> str:
    """The header value serve sends for a login or display name `value`."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates: not UTF-8, which serve sends as ""
        return ""
    if all(" " <= ch <= "~" or ch == "\t" for ch in value):
        return value  # Go's needsEncoding: nothing outside printable ASCII and tab
    words, text = [], ""
    for ch in value:
        piece = _q_piece(ch)
        if len(text) + len(piece) > MAX_WORD_TEXT:
            words.append(text)
            text = ""
        text += piece
    words.append(text)
    return " ".join(f"=?utf-8?q?{word}?=" for word in words)


def decode_words(value: str) -> str | None:
    """The text of a value made only of UTF-8 encoded words, or None if it is not one or
    does not decode cleanly. For display, and to recognise what serve encoded."""
    if not ENCODED_WORDS.fullmatch(value):
        return None
    raw = b""
    for charset, kind, text in WORD.findall(value):
        if charset.lower() != "utf-8":
            return None
        try:
            if kind in "qQ":
                raw += QHEX.sub(lambda m: chr(int(m[1], 16)),
                                text.replace("_", " ")).encode("latin-1")
            else:
                raw += base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError):
            return None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return None


def login_from_header(raw: str) -> tuple[str, str]:
    """(key, shown) for a Tailscale-User-Login value: `key` is what is compared with
    `login_key(configured login)`, `shown` is the login for people to read. Refuses a
    value serve would never send for anyone."""
    value = raw.strip(" \t")
    if not value:  # serve sends no header at all for no identity; blank is someone else
        raise Denied(403, "the Tailscale-User-Login header is blank",
                     seen_as="nobody (a malformed identity header)")
    # serve sends printable ASCII only: non-ASCII logins are encoded, and WSGI hands us
    # header bytes as latin-1, so anything else was typed by someone other than serve.
    if not all(" " <= ch <= "~" for ch in value):
        raise Denied(403, "the Tailscale-User-Login header holds characters tailscale serve "
                          "never sends", seen_as="nobody (a malformed identity header)")
    decoded = decode_words(value)
    if decoded is None:
        if " " in value:
            raise Denied(403, "the Tailscale-User-Login header is not a login",
                         seen_as="nobody (a malformed identity header)")
        return ascii_lower(value), value
    # serve encodes only what is not ASCII, and in exactly one way. A value that decodes
    # to ASCII, or that serve would have encoded differently, is a login that merely
    # looks encoded: it is refused rather than read as the login it spells.
    if decoded.isascii() or serve_header_value(decoded) != value:
        raise Denied(403, "the Tailscale-User-Login header looks RFC 2047 encoded, but "
                          "tailscale serve would not have encoded it so",
                     seen_as=f"nobody (a login that reads {value!r})")
    return ascii_lower(value), clean_name(decoded)


def login_key(login: str) -> str:
    """What a configured login is compared as: serve's header for it as HTTP delivers it
    (surrounding spaces and tabs are not part of a header's value), ASCII-folded."""
    return ascii_lower(serve_header_value(login).strip(" \t"))
