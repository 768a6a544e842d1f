"""The JAAS login-module entries Kafka reads from `sasl.jaas.config` and its listener-prefixed forms.

Grammar (one entry; a `KafkaServer { ... };` file section holds the same entries):

    entry   := CLASS FLAG option* ";"
    FLAG    := required | requisite | sufficient | optional
    option  := KEY "=" ( '"' chars with \\" and \\\\ escapes '"' | bare-word )

A JAAS file (`parse_jaas_file`) is named sections, each `Name { entry... };`, with `//` and `/* */` comments.

Rule: anything that does not parse raises `JaasError` with one line naming where; an unknown login module is
refused by the caller (sasl_config.py), never ignored.
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
        module, flag = tokens.pop(0), tokens.pop(0) if tokens else ("", "")
        if module[0] != "word" or flag[0] != "word" or flag[1] not in _FLAGS:
            raise JaasError(f"JAAS entry must open with LoginModuleClass and one of {', '.join(_FLAGS)}: {text!r}")
        options = {}
        while tokens and tokens[0][0] != "semi":
            if len(tokens) < 3 or tokens[0][0] != "word" or tokens[1][0] != "eq" or tokens[2][0] == "semi":
                raise JaasError(f"JAAS option of {module[1]} is not key=value: {text!r}")
            options[tokens[0][1]] = tokens[2][1]
            del tokens[:3]
        if not tokens:
            raise JaasError(f"JAAS entry of {module[1]} does not end with ';'")
        tokens.pop(0)
        entries.append(JaasEntry(module[1], flag[1], options))
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


def _tokens(text: str) -> list[tuple[str, str]]:
    out, pos, text = [], 0, text.strip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            raise JaasError(f"JAAS configuration does not parse at character {pos}: {text!r}")
        kind = m.lastgroup or ""  # one named group matches whenever the match is not empty
        value = m.group(kind)
        out.append((kind, re.sub(r"\\(.)", r"\1", value) if kind == "quoted" else value))
        pos = m.end()
        while pos < len(text) and text[pos].isspace():
            pos += 1
    return [("word", v) if k == "quoted" else (k, v) for k, v in out]
