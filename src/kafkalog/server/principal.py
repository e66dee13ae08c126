"""Who a connection is: its principal and address, as Kafka's DefaultKafkaPrincipalBuilder and
SslPrincipalMapper make them.

Why: ACLs name principals (``User:alice``) and hosts; a SASL client is ``User:<name>`` once it
has logged in, a TLS client with a certificate is ``User:<its subject DN>`` (RFC 2253, as
Java's X500Principal writes it) after ``ssl.principal.mapping.rules``, and everyone else is
``User:ANONYMOUS``. Refuses: a mapping rule that does not parse (at start-up, naming the key),
and a certificate no rule maps (the connection is closed, as Kafka fails its authentication).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kafkalog.errors import InvalidConfigError
from kafkalog.protocol.wire import ANONYMOUS_PRINCIPAL

# X500Principal.getName(RFC2253)'s keywords; other attributes are written by their OIDs
_RFC2253_KEYWORDS = {
    "commonName": "CN", "countryName": "C", "localityName": "L",
    "stateOrProvinceName": "ST", "organizationName": "O", "organizationalUnitName": "OU",
    "streetAddress": "STREET", "domainComponent": "DC", "userId": "UID",
}  # fmt: skip
_OIDS = {"emailAddress": "1.2.840.113549.1.9.1", "serialNumber": "2.5.4.5"}
# SslPrincipalMapper's grammar: DEFAULT, or RULE:pattern/replacement/[LU], comma-separated
_RULE = re.compile(
    r"((DEFAULT)|(RULE:((\\.|[^\\/])*)/((\\.|[^\\/])*)/([LU]?).*?)|(.*?))\s*(,\s*|$)"
)


@dataclass(frozen=True, slots=True)
class Peer:
    """A connection as the request door sees it: the listener it came in through, the
    client's address, its principal before any SASL login, and an id no other connection of
    this process has (Kafka's connectionId, which share sessions are tied to)."""

    listener: str = ""
    host: str = ""
    principal: str = ANONYMOUS_PRINCIPAL
    connection_id: str = ""


def _escape(value: str) -> str:
    """RFC 2253 escaping of an attribute value."""
    out = re.sub(r'([,+"\\<>;])', r"\\\1", value)
    if out.startswith((" ", "#")):
        out = "\\" + out
    if out.endswith(" ") and not out.endswith("\\ "):
        out = out[:-1] + "\\ "
    return out


def subject_dn(certificate: dict[str, Any]) -> str:
    """The subject of a certificate as ``ssl.getpeercert()`` gives it, written as Java's
    X500Principal.getName() writes it: the most specific name first."""
    rdns = []
    for rdn in reversed(certificate.get("subject", ())):
        parts = []
        for key, value in rdn:
            keyword = _RFC2253_KEYWORDS.get(key) or _OIDS.get(key) or key
            parts.append(f"{keyword}={_escape(str(value))}")
        rdns.append("+".join(parts))
    return ",".join(rdns)


def _java_replacement(replacement: str) -> str:
    """A java.util.regex replacement (``$1``, ``\\/``) as Python's re.sub takes it."""
    out, i = [], 0
    while i < len(replacement):
        ch = replacement[i]
        if ch == "\\" and i + 1 < len(replacement):
            out.append(replacement[i + 1].replace("\\", "\\\\"))
            i += 2
        elif ch == "$" and i + 1 < len(replacement) and replacement[i + 1].isdigit():
            j = i + 1
            while j < len(replacement) and replacement[j].isdigit():
                j += 1
            out.append(f"\\g<{replacement[i + 1 : j]}>")
            i = j
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def principal_mapper(rules: str) -> Callable[[str], str | None]:
    """``ssl.principal.mapping.rules`` as a function of a DN: the first rule whose pattern
    matches the whole DN gives the name (lower- or upper-cased with ``/L`` or ``/U``), DEFAULT
    gives the DN, and None means no rule matched."""
    parsed: list[tuple[re.Pattern[str], str, str] | None] = []  # None: DEFAULT
    text = rules.strip() or "DEFAULT"
    pos = 0
    while pos < len(text):
        match = _RULE.match(text, pos)
        if match is None or match.end() == pos:
            raise InvalidConfigError("ssl.principal.mapping.rules", f"cannot parse {text!r}")
        pos = match.end()
        if match.group(2):
            parsed.append(None)
        elif match.group(3):
            try:
                pattern = re.compile(match.group(4))
            except re.error as err:
                raise InvalidConfigError(
                    "ssl.principal.mapping.rules", f"{match.group(4)!r}: {err}"
                ) from err
            parsed.append((pattern, _java_replacement(match.group(6)), match.group(8)))
        elif match.group(9):
            raise InvalidConfigError(
                "ssl.principal.mapping.rules", f"invalid rule: {match.group(9)!r}"
            )

    def mapped(dn: str) -> str | None:
        for rule in parsed:
            if rule is None:
                return dn
            pattern, replacement, case = rule
            if pattern.fullmatch(dn):
                name = pattern.sub(replacement, dn, count=1)
                return name.lower() if case == "L" else name.upper() if case == "U" else name
        return None

    return mapped
