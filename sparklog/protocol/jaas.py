"""The JAAS login-module entries Kafka reads from `sasl.jaas.config` and its listener-prefixed forms.

Grammar (one entry; a `KafkaServer { ... };` file section holds the same entries):

    entry   := CLASS FLAG option* ";"
    FLAG    := required | requisite | sufficient | optional
    option  := KEY "=" ( '"' chars with \\" and \\\\ escapes '"' | bare-word )

A JAAS file (`parse_jaas_file`) is named sections, each `Name { entry... };`, with `//` and `/* */` comments.

Rule: anything that does not parse raises `JaasError` with one line naming where (a character position, an
option's place), never quoting the text: it holds passwords. The login module, the flag and each option's key are
bare words (as Kafka's parser wants); a value is bare or quoted. An unknown login module is refused by the caller
(sasl_config.py), never ignored.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = ["JaasEntry", "JaasError", "parse_jaas", "parse_jaas_file", "PLAIN_LOGIN_MODULE", "SCRAM_LOGIN_MODULE"]

PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_LOGIN_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
_FLAGS = ("required", "requisite", "sufficient", "optional")
_SECTION = re.compile(r'\s*(?P<name>[A-Za-z0-9_.$\-]+)\s*\{(?P<body>(?:[^"}]|"(?:[^"\\]|\\.)*")*)\}\s*;')
_COMMENT = re.compile(r'"(?:[^"\\]|\\.)*"|//[^\n]*|/\*.*?\*/', re.DOTALL)
_TOKEN = re.compile(r'\s*(?:(?P<word>[A-Za-z0-9_.$\-]+)|(?P<eq>=)|(?P<semi>;)|"(?P<quoted>(?:[^"\\]|\\.)*)")')


class JaasError(ValueError):
    """A JAAS configuration that does not parse."""


@dataclass(frozen=True)
class JaasEntry:
    login_module: str
    flag: str
    options: dict[str, str] = field(default_factory=dict)


def parse_jaas(text: str) -> list[JaasEntry]:
    tokens = _tokens(text)
    entries = []
    while tokens:
        module, flag = tokens.pop(0), tokens.pop(0) if tokens else ("", "", len(text))
        if module[0] != "word" or flag[0] != "word" or flag[1] not in _FLAGS:
            raise JaasError(f"JAAS entry at character {module[2]} must open with LoginModuleClass and one of "
                            f"{', '.join(_FLAGS)}")
        entries.append(JaasEntry(module[1], flag[1], _options(module[1], tokens)))
    return entries


def parse_jaas_file(text: str) -> dict[str, list[JaasEntry]]:
    """A JAAS file's sections, by name (`KafkaServer`, `Client` ...); JaasError naming where it stops parsing."""
    text = _COMMENT.sub(lambda m: m.group(0) if m.group(0).startswith('"') else " ", text).strip()
    sections, pos = {}, 0
    while pos < len(text):
        m = _SECTION.match(text, pos)
        if m is None:
            raise JaasError(f"JAAS file does not parse as 'Name {{ entries }};' at character {pos}")
        if m.group("name") in sections:
            raise JaasError(f"JAAS file names section {m.group('name')} twice")
        sections[m.group("name")] = parse_jaas(m.group("body"))
        pos = m.end()
        while pos < len(text) and text[pos].isspace():
            pos += 1
    return sections


def _options(module: str, tokens: list[tuple[str, str, int]]) -> dict[str, str]:
    """The options of one entry up to its ';' (consumed from `tokens`); a message names the option by its place,
    never by its text, which may hold a password (Rule)."""
    options: dict[str, str] = {}
    while tokens and tokens[0][0] != "semi":
        if len(tokens) < 3 or tokens[0][0] != "word" or tokens[1][0] != "eq" or tokens[2][0] not in ("word",
                                                                                                     "quoted"):
            raise JaasError(f"JAAS option {len(options) + 1} of {module} (character {tokens[0][2]}) is not "
                            f"key=value")
        options[tokens[0][1]] = tokens[2][1]
        del tokens[:3]
    if not tokens:
        raise JaasError(f"JAAS entry of {module} does not end with ';'")
    tokens.pop(0)
    return options


def _tokens(text: str) -> list[tuple[str, str, int]]:
    """(kind, value, character) of each token: word, eq, semi or quoted (unescaped)."""
    out, pos, text = [], 0, text.strip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            raise JaasError(f"JAAS configuration does not parse at character {pos}")
        kind = m.lastgroup or ""  # one named group matches whenever the match is not empty
        value = m.group(kind)
        out.append((kind, re.sub(r"\\(.)", r"\1", value) if kind == "quoted" else value, pos))
        pos = m.end()
        while pos < len(text) and text[pos].isspace():
            pos += 1
    return out
