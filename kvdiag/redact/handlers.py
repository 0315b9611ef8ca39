"""How a value found by a pattern becomes its pseudonym, and who counts it.

Each handler of categories.toml is a function here: addresses are checked as addresses
(loopback stays), host names against the public sites everyone knows, credentials for
looking random, prompts keep their length. The Resolver gives out the pseudonyms and counts
each replacement for the file it was made in.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable

from kvdiag.redact.catalogue import Pattern
from kvdiag.redact.pseudonyms import Pseudonyms, is_value

# Public sites everyone knows: naming them identifies nobody, and links to docs stay useful.
PUBLIC_HOSTS = (
    "huggingface.co",
    "hf.co",
    "github.com",
    "githubusercontent.com",
    "pypi.org",
    "python.org",
    "pytorch.org",
    "nvidia.com",
    "vllm.ai",
    "sglang.ai",
    "readthedocs.io",
    "docker.io",
    "docker.com",
)
_MEMO_MAX = 100_000  # values remembered per pass, so that memory stays bounded
_LOCAL_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})


class Resolver:
    """Turns an original value into what stands in its place, and counts it for a file."""

    def __init__(self, names: Pseudonyms, keep: frozenset[str], learning: bool) -> None:
        self.names, self.keep, self.learning = names, keep, learning
        self.rel = ""
        self.learn_values = False  # the pattern at work marks what it finds for everywhere
        # pattern -> whole match -> (what it became, the categories it counted): a client
        # address recurs on thousands of access lines, and working it out is the costly part.
        self._memo: dict[str, dict[str, tuple[str, tuple[str, ...]]]] = {}
        self._assigned: list[str] = []

    def swapper(self, pattern: Pattern) -> Callable[[re.Match[str]], str]:
        """The `re.sub` callback of a pattern: each distinct match worked out once."""
        memo = self._memo.setdefault(pattern.id, {})
        count = self.names.count

        def swap(m: re.Match[str]) -> str:
            whole = m.group(0)
            hit = memo.get(whole)
            if hit is None:
                self._assigned = []
                new = replacement(pattern, m, self)
                if len(memo) >= _MEMO_MAX:
                    memo.clear()
                memo[whole] = (new, tuple(self._assigned))
                return new
            if not self.learning:
                for category in hit[1]:
                    count(self.rel, category)
            return hit[0]

        return swap

    def assign(self, category: str, original: str) -> str | None:
        """The pseudonym, or None where the value stays (kept category, or no value)."""
        if category in self.keep or not is_value(original):
            return None
        self._assigned.append(category)
        if self.learning:
            if self.learn_values:
                self.names.learn(category, original)
        else:
            self.names.count(self.rel, category)
        return self.names.name(category, original)

    def swap(self, category: str, original: str) -> str:
        return self.assign(category, original) or original


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text.split("%", 1)[0])
    except ValueError:
        return None


def _local(addr: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    return addr.is_loopback or addr.is_unspecified or str(addr) == "255.255.255.255"


def host(name: str, r: Resolver) -> str:
    """A host as an address, a host name, or kept (loopback, localhost, public sites)."""
    bare = name[1:-1] if name.startswith("[") and name.endswith("]") else name
    addr = _address(bare)
    if addr is not None:
        return name if _local(addr) else name.replace(bare, r.swap("ip", bare))
    lowered = bare.lower().rstrip(".")
    if lowered in _LOCAL_NAMES or bare.isdigit() or _public(lowered):
        return name
    return r.swap("host", bare)


def _public(name: str) -> bool:
    return any(name == d or name.endswith("." + d) for d in PUBLIC_HOSTS)


def _hostport(value: str, r: Resolver) -> str:
    head, sep, port = value.rpartition(":")
    if sep and port.isdigit() and head and (head.count(":") == 0 or head.startswith("[")):
        return host(head, r) + ":" + port
    return host(value, r)


def _ipv6(value: str, r: Resolver) -> str:
    groups = value.split(":")
    whole = len(groups) == 8 and all(groups)
    if not whole and ("::" not in value or sum(1 for g in groups if g) < 2):
        return value  # a time of day, a MAC address, a C++ scope
    addr = _address(value)
    if addr is None or _local(addr):
        return value
    return r.swap("ip", value)


def _pod(value: str, r: Resolver) -> str:
    suffix = value.rsplit("-", 2)[-2:]
    return r.swap("host", value) if any(c.isdigit() for c in "".join(suffix)) else value


def _credential(value: str, r: Resolver) -> str:
    looks_random = any(c.isdigit() for c in value) or len(value) >= 24
    return r.swap("secret", value) if looks_random else value


def _prompt(value: str, r: Resolver) -> str:
    name = r.assign("prompt", value)
    return value if name is None else f"[{name}, {len(value)} chars]"


def _token_ids(value: str, r: Resolver) -> str:
    if "prompt" in r.keep:
        return value
    if not r.learning:
        r.names.count(r.rel, "prompt")
    return ", ".join("0" for _ in value.split(","))


def _request_id(value: str, r: Resolver) -> str:
    return value if value.isdigit() else r.swap("request_id", value)


_VALUE_HANDLERS: dict[str, Callable[[str, Resolver], str]] = {
    "hostport": _hostport,
    "ipv4": lambda v, r: v if (a := _address(v)) is None or _local(a) else r.swap("ip", v),
    "ipv6": _ipv6,
    "fqdn": lambda v, r: host(v, r),
    "pod": _pod,
    "credential": _credential,
    "prompt": _prompt,
    "token_ids": _token_ids,
    "request_id": _request_id,
}


def _url(m: re.Match[str], r: Resolver) -> str:
    """`scheme://user:password@host`: the user, the password and the host each replaced."""
    out = m.group("scheme") + "://"
    if m.group("user") is not None:
        out += r.swap("user", m.group("user"))
        if m.group("pw") is not None:
            out += ":" + r.swap("secret", m.group("pw"))
        out += "@"
    return out + host(m.group("v"), r)


def replacement(pattern: Pattern, m: re.Match[str], r: Resolver) -> str:
    """What the whole match becomes."""
    if pattern.handler == "url":
        return _url(m, r)
    start, end = pattern.value_span(m)
    value = m.string[start:end]
    handler = _VALUE_HANDLERS.get(pattern.handler)
    new = handler(value, r) if handler else r.swap(pattern.category, value)
    if new == value:
        return m.group(0)
    base = m.start()
    whole = m.group(0)
    return whole[: start - base] + new + whole[end - base :]
