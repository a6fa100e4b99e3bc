"""The network settings every HTTP request to a model server takes, whatever the transport:
the proxy (``HTTP(S)_PROXY``, ``ALL_PROXY``, ``NO_PROXY``) and the TLS context. Both transports,
the dialect probe, the pre-flight and the run's provenance read them here, so that a request
never goes another way than its neighbours."""

from __future__ import annotations

import base64
import contextlib
import functools
import os
import ssl
import sys
from typing import Any

import yarl


def proxy_for(url: str) -> str | None:
    """The proxy that requests to ``url`` go through, on either transport: ``HTTPS_PROXY`` for
    an https URL, ``HTTP_PROXY`` for an http one, else ``ALL_PROXY`` (either case, as
    :func:`urllib.request.getproxies` reads them); None where ``NO_PROXY`` covers the host.

    ``NO_PROXY`` is read as curl and the SDKs' own HTTP client read it: a comma-separated list
    of ``*`` (every host), host names (each covers itself and its subdomains; ``.example.com``
    and ``*.example.com`` only the subdomains), IP addresses and networks (``10.0.0.0/8``),
    each with an optional ``:port``. Loopback is proxied like any host unless it is listed.
    """
    import urllib.request

    found = urllib.request.getproxies()
    target = yarl.URL(url)
    proxy = found.get(target.scheme) or found.get("all")
    if not proxy or _bypassed(target, found.get("no", "")):
        return None
    return proxy if "://" in proxy else f"http://{proxy}"


def _bypassed(target: yarl.URL, no_proxy: str) -> bool:
    """Whether an entry of ``NO_PROXY``'s list covers ``target``'s host (and its port, where
    the entry names one)."""
    import ipaddress

    host = (target.host or "").lower().rstrip(".")
    address: ipaddress.IPv4Address | ipaddress.IPv6Address | None
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        address = None
    for entry in (e.strip().lower() for e in no_proxy.split(",")):
        if entry == "*":
            return True
        scheme, sep, rest = entry.partition("://")
        if sep:
            if scheme not in ("all", target.scheme):
                continue
            entry = rest
        name, port = _host_port(entry)
        if not name or (port is not None and port != target.port):
            continue
        if "/" in name or _is_address(name):
            with contextlib.suppress(ValueError):
                if address is not None and address in ipaddress.ip_network(name, strict=False):
                    return True
            continue
        name = name.removeprefix("*")
        if name.startswith("."):
            if host.endswith(name):
                return True
        elif host == name or host.endswith("." + name):
            return True
    return False


def _host_port(entry: str) -> tuple[str, int | None]:
    """A ``NO_PROXY`` entry's host (an IPv6 address without its brackets) and port."""
    if entry.startswith("["):
        name, _, rest = entry[1:].partition("]")
        if rest.startswith("/"):
            return name + rest, None
        port = rest[1:] if rest.startswith(":") else ""
    elif entry.count(":") == 1:
        name, _, port = entry.partition(":")
    else:  # a name, or an IPv6 address without brackets
        name, port = entry, ""
    return name.rstrip("."), int(port) if port.isdigit() else None


def _is_address(name: str) -> bool:
    import ipaddress

    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


@functools.cache
def tls_context() -> ssl.SSLContext:
    """The TLS settings of every model request, on either transport (made once, as loading the
    certificate authorities is costly): the authorities of ``SSL_CERT_FILE``,
    else of ``SSL_CERT_DIR``, else the system's, as the SDKs' own HTTP client finds them (on
    macOS and Windows the system's trust store, through ``truststore``, where installed)."""
    if cafile := os.environ.get("SSL_CERT_FILE"):
        return ssl.create_default_context(cafile=cafile)
    if capath := os.environ.get("SSL_CERT_DIR"):
        return ssl.create_default_context(capath=capath)
    if sys.platform in ("darwin", "win32"):
        with contextlib.suppress(ImportError):
            import truststore

            return truststore.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    return ssl.create_default_context()


def basic_auth(user: str, password: str) -> str:
    """The value of an ``Authorization`` (or ``Proxy-Authorization``) header for HTTP Basic
    authentication (RFC 7617, UTF-8). Made here: aiohttp's ``encode_basic_auth`` is missing from
    the older aiohttp versions parley supports, and its ``BasicAuth`` is deprecated."""
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode("ascii")


def request_options(url: str) -> dict[str, Any]:
    """What one aiohttp request to ``url`` takes to go the way every model call to it goes:
    ``proxy`` (without its credentials), the proxy's credentials as ``headers`` for plain
    http or ``proxy_headers`` for a tunnel (aiohttp sends the latter only with CONNECT), and
    ``ssl``. For GETs beside the model calls: the dialect probe, the pre-flight, provenance.

    Example::

        async with session.get(url, **request_options(url)) as response: ...
    """
    target = yarl.URL(url)
    options: dict[str, Any] = {"ssl": tls_context() if target.scheme == "https" else True}
    proxy = proxy_for(url)
    if proxy is None:
        return options
    parsed = yarl.URL(proxy)
    if parsed.user is not None:
        auth = {"Proxy-Authorization": basic_auth(parsed.user, parsed.password or "")}
        options["proxy_headers" if target.scheme == "https" else "headers"] = auth
        proxy = str(parsed.with_user(None))
    options["proxy"] = proxy
    return options
