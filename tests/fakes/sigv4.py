"""Verifies AWS Signature Version 4 by recomputing it from the request as received, following
AWS's published algorithm (not botocore's code, so a mistake in how the gateway uses botocore's
signer shows up here)."""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import parse_qsl, quote

_AUTH = re.compile(
    r"^AWS4-HMAC-SHA256 Credential=(?P<akid>[^/]+)/(?P<date>\d{8})/(?P<region>[^/]+)/(?P<service>[^/]+)/aws4_request,"
    r"\s*SignedHeaders=(?P<signed>[a-z0-9;-]+),\s*Signature=(?P<signature>[0-9a-f]{64})$"
)


@dataclass(frozen=True)
class AwsKey:
    access_key_id: str
    secret_access_key: str
    session_token: str | None = None


class SignatureRejected(Exception):
    """``code`` is the exception AWS names in ``x-amzn-errortype``."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _hmac(key: bytes, text: str) -> bytes:
    return hmac.new(key, text.encode(), hashlib.sha256).digest()


def verify(
    *,
    method: str,
    raw_path: str,
    raw_query: str,
    headers: Mapping[str, str],
    body: bytes,
    keys: Mapping[str, AwsKey],
    region: str,
    service: str,
) -> AwsKey:
    """The key that signed the request; raises ``SignatureRejected`` otherwise."""
    match = _AUTH.match(headers.get("authorization", ""))
    if match is None:
        raise SignatureRejected("IncompleteSignatureException", "Authorization header requires SigV4 fields.")
    key = keys.get(match["akid"])
    if key is None:
        raise SignatureRejected(
            "UnrecognizedClientException", "The security token included in the request is invalid."
        )
    if match["region"] != region or match["service"] != service:
        raise SignatureRejected("InvalidSignatureException", "Credential should be scoped to a valid region.")
    amz_date = headers.get("x-amz-date", "")
    if not amz_date.startswith(match["date"]):
        raise SignatureRejected("InvalidSignatureException", "Date in Credential scope does not match.")
    if key.session_token is not None and headers.get("x-amz-security-token") != key.session_token:
        raise SignatureRejected(
            "UnrecognizedClientException", "The security token included in the request is invalid."
        )
    signed = match["signed"].split(";")
    if "host" not in signed or "x-amz-date" not in signed or signed != sorted(signed):
        raise SignatureRejected(
            "InvalidSignatureException", "SignedHeaders must include host and x-amz-date."
        )
    query = sorted(
        (quote(k, safe="-_.~"), quote(v, safe="-_.~"))
        for k, v in parse_qsl(raw_query, keep_blank_values=True)
    )
    canonical = "\n".join(
        [
            method,
            quote(raw_path, safe="/~"),  # non-S3 services: the received (encoded) path, encoded again
            "&".join(f"{k}={v}" for k, v in query),
            "".join(f"{name}:{' '.join(headers.get(name, '').split())}\n" for name in signed),
            ";".join(signed),
            hashlib.sha256(body).hexdigest(),
        ]
    )
    scope = f"{match['date']}/{region}/{service}/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    signing_key = _hmac(
        _hmac(_hmac(_hmac(f"AWS4{key.secret_access_key}".encode(), match["date"]), region), service),
        "aws4_request",
    )
    expected = hmac.new(signing_key, to_sign.encode(), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected, match["signature"]):
        raise SignatureRejected(
            "InvalidSignatureException",
            "The request signature we calculated does not match the signature you provided. Check your "
            "AWS Secret Access Key and signing method. Consult the service documentation for details.",
        )
    return key
