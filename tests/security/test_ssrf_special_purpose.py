"""Every IANA special-purpose range gets the same verdict and reason on every Python.

ipaddress's is_private/is_global tables changed in 3.11.10, 3.12.4 and 3.13
(gh-113171), so the URL policy keeps its own table; this one pins a representative
address of every range to an expected verdict written out by hand.
"""

from __future__ import annotations

import pytest

from hostkit.builtins.web import UrlDenied, UrlPolicy

# (address, reason it is refused, or None where it is public)
RANGES: list[tuple[str, str | None]] = [
    ("0.0.0.0", "unspecified"),
    ("0.1.2.3", "private"),  # "this network"
    ("10.20.30.40", "private"),
    ("100.64.0.1", "non-global"),  # shared address space
    ("100.127.255.254", "non-global"),
    ("127.0.0.1", "loopback"),
    ("169.254.1.1", "link-local"),
    ("172.16.0.1", "private"),
    ("192.0.0.1", "private"),  # IPv4 service continuity prefix
    ("192.0.0.8", "non-global"),  # dummy address
    ("192.0.0.9", None),  # port control protocol anycast
    ("192.0.0.10", None),  # TURN anycast
    ("192.0.0.100", "non-global"),  # IETF protocol assignments
    ("192.0.0.170", "private"),  # NAT64/DNS64 discovery
    ("192.0.2.1", "private"),  # documentation
    ("192.31.196.1", None),  # AS112-v4
    ("192.52.193.1", None),  # AMT
    ("192.88.99.1", "non-global"),  # 6to4 relay anycast
    ("192.168.1.1", "private"),
    ("192.175.48.1", None),  # direct delegation AS112
    ("198.18.0.1", "private"),  # benchmarking
    ("198.51.100.1", "private"),  # documentation
    ("203.0.113.1", "private"),  # documentation
    ("224.0.0.1", "multicast"),
    ("240.0.0.1", "private"),  # reserved
    ("255.255.255.255", "private"),  # limited broadcast
    ("8.8.8.8", None),
    ("::", "unspecified"),
    ("::1", "loopback"),
    ("::ffff:10.0.0.1", "private"),  # IPv4-mapped: judged as the IPv4 address
    ("::ffff:8.8.8.8", None),
    ("64:ff9b::808:808", "reserved"),  # NAT64 of a public address: needs an entry
    ("64:ff9b:1::808:808", "reserved"),  # local-use NAT64
    ("100::1", "private"),  # discard-only
    ("100:0:0:1::1", "reserved"),  # dummy IPv6 prefix
    ("2001:0:808:808::f7f7:f7f7", None),  # Teredo, public server and client (8.8.8.8)
    ("2001:0:808:808::80ff:fffe", "loopback"),  # Teredo client 127.0.0.1
    ("2001:1::1", None),  # PCP anycast
    ("2001:1::2", None),  # TURN anycast
    ("2001:1::3", None),  # DNS-SD SRP anycast
    ("2001:1::4", "private"),  # IETF protocol assignments
    ("2001:2::1", "private"),  # benchmarking
    ("2001:3::1", None),  # AMT
    ("2001:4:112::1", None),  # AS112-v6
    ("2001:10::1", "private"),  # deprecated ORCHID
    ("2001:20::1", None),  # ORCHIDv2
    ("2001:30::1", None),  # DRIP entity tags
    ("2001:db8::1", "private"),  # documentation
    ("2002:808:808::1", None),  # 6to4 of 8.8.8.8
    ("2002:a00:1::", "private"),  # 6to4 of 10.0.0.1
    ("2002:7f00:1::", "loopback"),  # 6to4 of 127.0.0.1
    ("2620:4f:8000::1", None),  # direct delegation AS112
    ("2606:4700::1111", None),
    ("3fff::1", "non-global"),  # documentation
    ("5f00::1", "reserved"),  # SRv6 SIDs
    ("fc00::1", "private"),
    ("fd12:3456::1", "private"),
    ("fe80::1", "link-local"),
    ("fec0::1", "reserved"),  # deprecated site-local
    ("ff02::1", "multicast"),
]


def _url(address: str) -> str:
    return f"http://[{address}]/" if ":" in address else f"http://{address}/"


@pytest.mark.parametrize(("address", "reason"), RANGES)
def test_every_special_purpose_range_has_one_verdict(address: str, reason: str | None) -> None:
    policy = UrlPolicy()
    if reason is None:
        assert policy.check(_url(address)).addresses
        return
    with pytest.raises(UrlDenied) as caught:
        policy.check(_url(address))
    assert caught.value.reason == reason


@pytest.mark.parametrize(
    ("allow", "address"),
    [
        ("10.0.0.0/8", "2002:a00:1::"),  # 6to4 is judged by the IPv4 address it embeds
        ("10.0.0.0/8", "::ffff:10.0.0.1"),
        ("64:ff9b::/96", "64:ff9b::808:808"),
    ],
)
def test_an_entry_for_the_embedded_address_opens_it(allow: str, address: str) -> None:
    assert UrlPolicy(allow_private=frozenset({allow})).check(_url(address)).addresses
