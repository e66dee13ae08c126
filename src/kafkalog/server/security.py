"""A listener's security, from the broker's own keys: TLS (``SSL``, ``SASL_SSL``) and SASL
(``SASL_PLAINTEXT``, ``SASL_SSL``) with the PLAIN and SCRAM-SHA-256/512 mechanisms.

Why: a broker anyone on the network can write to is a development tool; the keys are Kafka's,
so a team's ``server.properties`` carries over: ``ssl.keystore.*`` / ``ssl.truststore.*`` /
``ssl.client.auth`` (PEM stores, KIP-651), ``sasl.enabled.mechanisms``, and the users of PLAIN
in the listener's JAAS config (``listener.name.<listener>.plain.sasl.jaas.config``, or
``sasl.jaas.config``), ``user_<name>="<password>"`` as Kafka's PlainLoginModule reads them.
SCRAM users live in ``kafkalog-scram-credentials`` in the first log directory (scram_store),
added with ``kafkalog serve --add-scram`` as ``kafka-storage format --add-scram`` does.

Refuses: JKS and PKCS12 stores (Python's ``ssl`` reads PEM; ``keytool`` converts), GSSAPI and
OAUTHBEARER (not served), a SASL listener without a mechanism it can serve, and an ``SSL``
key store that cannot be read, each at start-up with the key that is wrong.
"""

from __future__ import annotations

import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kafkalog.errors import InvalidConfigError
from kafkalog.server.principal import principal_mapper

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SERVED_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
_JAAS_OPTION = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True)
class ListenerSecurity:
    """What a connection to the listener must do before its requests are served."""

    protocol: str = "PLAINTEXT"
    ssl_context: ssl.SSLContext | None = None
    mechanisms: tuple[str, ...] = ()
    plain_users: Mapping[str, str] = field(default_factory=dict)
    # ssl.principal.mapping.rules: a TLS client certificate's subject DN -> its principal name
    principal_mapping_rules: str = "DEFAULT"

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    @property
    def authenticated(self) -> bool:
        """Whether the listener authenticates its clients (SASL, or TLS with client certs)."""
        return self.sasl or (
            self.ssl_context is not None and self.ssl_context.verify_mode == ssl.CERT_REQUIRED
        )


def _get(props: Mapping[str, Any], listener: str, key: str, default: str | None = None) -> Any:
    """A key as Kafka resolves it: ``listener.name.<listener>.<key>`` first, then ``key``."""
    prefixed = f"listener.name.{listener.lower()}.{key}"
    if prefixed in props:
        return props[prefixed]
    return props.get(key, default)


def _ssl_context(props: Mapping[str, Any], listener: str) -> ssl.SSLContext:
    for kind in ("keystore", "truststore"):
        store_type = str(_get(props, listener, f"ssl.{kind}.type", "JKS")).upper()
        if _get(props, listener, f"ssl.{kind}.location") and store_type != "PEM":
            raise InvalidConfigError(
                f"ssl.{kind}.type",
                f"{store_type} stores are not read by kafkalog serve: set ssl.{kind}.type=PEM "
                f"with a PEM file (keytool -exportcert / openssl pkcs12 convert one)",
            )
    location = _get(props, listener, "ssl.keystore.location")
    if not location:
        raise InvalidConfigError(
            "ssl.keystore.location", f"the {listener} listener needs a PEM key store"
        )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    password = _get(props, listener, "ssl.key.password") or None
    try:
        context.load_cert_chain(str(location), password=password)
    except (OSError, ssl.SSLError, ValueError) as err:
        raise InvalidConfigError(
            "ssl.keystore.location",
            f"cannot read a certificate chain and key from {location}: {err}",
        ) from err
    client_auth = str(_get(props, listener, "ssl.client.auth", "none")).lower()
    if client_auth not in ("none", "requested", "required"):
        raise InvalidConfigError(
            "ssl.client.auth", f"{client_auth!r} is not none, requested or required"
        )
    trust = _get(props, listener, "ssl.truststore.location")
    if trust:
        try:
            context.load_verify_locations(str(trust))
        except (OSError, ssl.SSLError) as err:
            raise InvalidConfigError(
                "ssl.truststore.location", f"cannot read CA certificates from {trust}: {err}"
            ) from err
    elif client_auth != "none":
        raise InvalidConfigError(
            "ssl.truststore.location", f"ssl.client.auth={client_auth} needs a trust store"
        )
    context.verify_mode = {
        "none": ssl.CERT_NONE,
        "requested": ssl.CERT_OPTIONAL,
        "required": ssl.CERT_REQUIRED,
    }[client_auth]
    return context


def plain_users(jaas: str | None) -> dict[str, str]:
    """The ``user_<name>="<password>"`` options of a PlainLoginModule JAAS entry."""
    if not jaas:
        return {}
    return {
        key[len("user_") :]: value.replace('\\"', '"')
        for key, value in _JAAS_OPTION.findall(jaas)
        if key.startswith("user_")
    }


def listener_security(protocol: str, listener: str, props: Mapping[str, Any]) -> ListenerSecurity:
    """The security of listener ``listener`` (its name, e.g. ``SASL_SSL``) speaking
    ``protocol``, from the broker's properties."""
    if protocol not in SECURITY_PROTOCOLS:
        raise InvalidConfigError("listener.security.protocol.map", f"unknown protocol {protocol!r}")
    context = _ssl_context(props, listener) if protocol.endswith("SSL") else None
    if not protocol.startswith("SASL_"):
        rules = str(_get(props, listener, "ssl.principal.mapping.rules", "DEFAULT"))
        principal_mapper(rules)  # a rule that does not parse stops the start, naming the key
        return ListenerSecurity(protocol, context, principal_mapping_rules=rules)
    enabled = str(_get(props, listener, "sasl.enabled.mechanisms", "GSSAPI"))
    wanted = tuple(m.strip().upper() for m in enabled.split(",") if m.strip())
    unknown = [m for m in wanted if m not in SERVED_MECHANISMS]
    if unknown or not wanted:
        raise InvalidConfigError(
            "sasl.enabled.mechanisms",
            f"kafkalog serve has {', '.join(SERVED_MECHANISMS)}, not {', '.join(unknown) or 'none'}"
            " (Kafka's default is GSSAPI: name the mechanisms)",
        )
    users: dict[str, str] = {}
    if "PLAIN" in wanted:
        jaas = _get(props, listener, "plain.sasl.jaas.config") or props.get("sasl.jaas.config")
        users = plain_users(jaas)
        if not users:
            raise InvalidConfigError(
                f"listener.name.{listener.lower()}.plain.sasl.jaas.config",
                'PLAIN needs users: PlainLoginModule required user_alice="alice-secret";',
            )
    return ListenerSecurity(protocol, context, wanted, users)
