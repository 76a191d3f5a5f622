"""The ``bedrock`` kind: Claude on Amazon Bedrock (``upstream.bedrock``), signed with AWS
credentials. botocore (the ``bedrock`` extra) is imported only by the checks and the provider."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import ClassVar, Literal

from pydantic import Field

from modelgate.upstream.kind import BetasConfig, ProviderConfig, Strict


class AwsCredentialConfig(Strict):
    """One AWS identity of a ``bedrock`` credential pool: a named profile of the shared AWS
    files, or the names of the environment variables holding an access key (never the key)."""

    profile: str | None = Field(default=None, min_length=1)
    access_key_id_env: str | None = Field(default=None, min_length=1)
    secret_access_key_env: str | None = Field(default=None, min_length=1)
    session_token_env: str | None = Field(default=None, min_length=1)


class BedrockConfig(ProviderConfig):
    extra: ClassVar[tuple[str, str] | None] = ("bedrock", "botocore")
    genai_name: ClassVar[str | None] = "aws.bedrock"
    runs_hosted_tools: ClassVar[bool] = False
    implementation: ClassVar[str] = "modelgate.upstream.bedrock:BedrockProvider"

    kind: Literal["bedrock"]
    #: The AWS region (``us-east-1``).
    region: str | None = None
    #: The AWS identities to use (a pool when several); none = the standard AWS chain.
    aws_credentials: list[AwsCredentialConfig] | None = None
    #: The body's ``anthropic_version`` (default: the provider's).
    anthropic_version: str | None = None
    #: Verdicts on betas that override the kind's table.
    betas: BetasConfig = Field(default_factory=BetasConfig)

    def resolved_base_url(self) -> str | None:
        if self.base_url or not self.region:
            return self.base_url
        suffix = ".amazonaws.com.cn" if self.region.startswith("cn-") else ".amazonaws.com"
        return f"https://bedrock-runtime.{self.region}{suffix}"

    def check_kind(self, where: str, env: Mapping[str, str]) -> None:
        if self.api_key_env is not None:
            raise ValueError(f"{where}.api_key_env: bedrock signs with AWS credentials; use aws_credentials")
        if not self.region:
            raise ValueError(f"{where}.region: required for kind 'bedrock' (for example 'us-east-1')")
        self.require_extra(where)
        from botocore.loaders import create_loader

        partitions = create_loader().load_data("endpoints")["partitions"]
        if not any(re.match(p["regionRegex"], self.region) for p in partitions):
            raise ValueError(f"{where}.region: {self.region!r} is not an AWS region name (like 'us-east-1')")
        from modelgate.upstream.aws_auth import resolve_aws_credentials

        resolve_aws_credentials(self.region, self.aws_credentials, where, env)
