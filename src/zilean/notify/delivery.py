"""Sending one notice to one target: a signed webhook POST, an email, or an Apprise URL.

Each send is bounded by a timeout and raises `DeliveryFailed` with a message safe to log
and return (never a credential). Nothing here is retried: a delivery is fire-once.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import ipaddress
import json
import logging
import smtplib
import socket
import ssl
import time
import uuid
from dataclasses import dataclass
from email.message import EmailMessage
from typing import Any

import aiohttp
import structlog

from zilean.notify.settings import AppriseSettings, SmtpSettings

log = structlog.get_logger(__name__)

DELIVERY_TIMEOUT = 10.0  # seconds any one delivery may take, connect to answer


class DeliveryFailed(Exception):
    """The target did not take the notice; the message says why, without secrets."""


@dataclass(frozen=True)
class Notice:
    """One thing to tell: plain text for people (Apprise, email), JSON for webhooks."""

    event: str  # the X-Zilean-Event value and the filter kind
    title: str
    body: str
    payload: dict[str, Any]
    recovery: bool = False


def signature(secret: str, timestamp: str, body: bytes) -> str:
    """`sha256=<hex>` of HMAC-SHA256 over `<timestamp>.<body>`."""
    digest = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    return "sha256=" + digest.hexdigest()


async def post_webhook(
    client: aiohttp.ClientSession,
    url: str,
    secret: str | None,
    notice: Notice,
    *,
    within: float = DELIVERY_TIMEOUT,
) -> None:
    """POST the notice's JSON once; a redirect, a non-2xx answer or an error fails it."""
    body = json.dumps(notice.payload, ensure_ascii=False, separators=(",", ":")).encode()
    timestamp = str(int(time.time()))
    headers = {
        "Content-Type": "application/json",
        "X-Zilean-Event": notice.event,
        "X-Zilean-Delivery": str(uuid.uuid4()),
        "X-Zilean-Timestamp": timestamp,
    }
    if secret:
        headers["X-Zilean-Signature"] = signature(secret, timestamp, body)
    try:
        async with (
            asyncio.timeout(within),
            client.post(url, data=body, headers=headers, allow_redirects=False) as response,
        ):
            status = response.status
    except TimeoutError:
        raise DeliveryFailed(f"no answer within {within:g} s") from None
    except (aiohttp.ClientError, ValueError) as exc:
        raise DeliveryFailed(f"could not be sent ({type(exc).__name__})") from None
    if not 200 <= status < 300:
        raise DeliveryFailed(f"answered {status}")


def refused_address(address: str) -> bool:
    """Link-local, unspecified and multicast addresses: never a mail relay, and where
    cloud metadata services answer. Private and loopback addresses are fine."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_link_local or ip.is_unspecified or ip.is_multicast


def check_relay(host: str, port: int) -> None:
    """Refuse a relay any of whose addresses is refused (blocking: resolves `host`)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        raise DeliveryFailed(f"the SMTP host cannot be resolved ({exc})") from None
    if any(refused_address(str(info[4][0])) for info in infos):
        raise DeliveryFailed(
            "the SMTP host resolves to a link-local, unspecified or multicast address; refused"
        )


def _send_mail(smtp: SmtpSettings, to: str, subject: str, body: str, timeout: float) -> None:
    check_relay(smtp.host, smtp.port)
    message = EmailMessage()
    message["From"] = smtp.sender or smtp.username or "zilean@localhost"
    message["To"] = to
    message["Subject"] = subject
    message.set_content(body)
    context = ssl.create_default_context()
    client: smtplib.SMTP
    if smtp.port == 465:
        client = smtplib.SMTP_SSL(smtp.host, smtp.port, timeout=timeout, context=context)
    else:
        client = smtplib.SMTP(smtp.host, smtp.port, timeout=timeout)
    with client:
        client.ehlo()
        if smtp.port != 465 and client.has_extn("starttls"):
            client.starttls(context=context)
            client.ehlo()
        if smtp.username and smtp.password:
            client.login(smtp.username, smtp.password)
        client.send_message(message)


async def send_email(
    smtp: SmtpSettings, to: str, subject: str, body: str, *, within: float = DELIVERY_TIMEOUT
) -> None:
    """Send one message through `smtp`; the SMTP error (never the password) on failure."""
    try:
        async with asyncio.timeout(within + 1):
            await asyncio.to_thread(_send_mail, smtp, to, subject, body, within)
    except DeliveryFailed:
        raise
    except TimeoutError:
        raise DeliveryFailed(f"the SMTP server did not answer within {within:g} s") from None
    except smtplib.SMTPException as exc:
        raise DeliveryFailed(f"SMTP error: {_smtp_error(exc)}") from None
    except (OSError, ssl.SSLError) as exc:
        raise DeliveryFailed(f"could not reach the SMTP server ({exc})") from None


def _smtp_error(exc: smtplib.SMTPException) -> str:
    if isinstance(exc, smtplib.SMTPResponseException):
        text = exc.smtp_error.decode(errors="replace") if isinstance(exc.smtp_error, bytes) else ""
        return f"{exc.smtp_code} {text}".strip()
    return str(exc) or type(exc).__name__


def _apprise() -> Any:
    """The `apprise` module, loaded on first use (only core sends notices).

    Its own log lines can name a service URL, credentials and all: they are silenced,
    and ours say which target failed instead.
    """
    import apprise

    logging.getLogger("apprise").setLevel(logging.CRITICAL)
    return apprise


def _notify_in_process(url: str, title: str, body: str) -> bool:
    apprise = _apprise()

    sender = apprise.Apprise()
    if not sender.add(url):
        raise DeliveryFailed("Apprise does not recognise this service URL")
    return bool(sender.notify(title=title, body=body))


def apprise_url_valid(url: str) -> bool:
    apprise = _apprise()
    return bool(apprise.Apprise().add(url))


async def send_apprise(
    client: aiohttp.ClientSession,
    server: AppriseSettings,
    url: str,
    notice: Notice,
    *,
    within: float = DELIVERY_TIMEOUT,
) -> None:
    """Deliver through the configured Apprise API server, or in process with `apprise`."""
    if server.server is None:
        try:
            async with asyncio.timeout(within):
                sent = await asyncio.to_thread(_notify_in_process, url, notice.title, notice.body)
        except TimeoutError:
            raise DeliveryFailed(f"no answer within {within:g} s") from None
        if not sent:
            raise DeliveryFailed("the Apprise service did not take the notice")
        return
    payload = {"urls": url, "title": notice.title, "body": notice.body}
    try:
        async with (
            asyncio.timeout(within),
            client.post(
                server.server, json=payload, ssl=server.verify_tls, allow_redirects=False
            ) as response,
        ):
            status = response.status
    except TimeoutError:
        raise DeliveryFailed(f"the Apprise server did not answer within {within:g} s") from None
    except (aiohttp.ClientError, ValueError) as exc:
        raise DeliveryFailed(
            f"the Apprise server could not be reached ({type(exc).__name__})"
        ) from None
    if not 200 <= status < 300:
        raise DeliveryFailed(f"the Apprise server answered {status}")
