"""Interop: signed agent cards (A2A §8.4) with the official A2A Python SDK's signer and
verifier (``a2a.utils.signing``, ``a2a-sdk[signing]``).

``tests/interop/run.sh`` starts two servers that sign their cards, with an API key
(so the cards declare security schemes and offer the extended card):
``$A2A_SIGNED_HYBRID_URL`` writes the 0.3 fields beside the 1.0 ones (the default card)
and signs with ES256; ``$A2A_SIGNED_V1_URL`` writes the 1.0 fields only and signs with
EdDSA. Both directions are tested: the SDK verifies our cards (public and extended) as
its client parses them, and a card the SDK signs is accepted by ``agent-a2a
verify-card`` (``$A2A_SERVER_BINARY``), the check our own client uses.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
from pathlib import Path

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives.serialization import load_pem_private_key
from google.protobuf.json_format import MessageToDict

from a2a.client.card_resolver import parse_agent_card
from a2a.utils.constants import AGENT_CARD_WELL_KNOWN_PATH
from a2a.utils.signing import (
    InvalidSignaturesError,
    create_agent_card_signer,
    create_signature_verifier,
)

SERVERS = {
    "hybrid": (os.environ.get("A2A_SIGNED_HYBRID_URL", ""), "ES256"),
    "v1": (os.environ.get("A2A_SIGNED_V1_URL", ""), "EdDSA"),
}
API_KEY = os.environ.get("A2A_SIGNED_API_KEY", "")
SERVER_BINARY = os.environ.get("A2A_SERVER_BINARY", "")
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def server(name: str) -> tuple[str, str]:
    url, algorithm = SERVERS[name]
    if not url:
        pytest.fail(f"no signing server for {name}: run tests/interop/run.sh")
    return url.rstrip("/"), algorithm


def key_provider(url: str):
    """Keys from the server's own JWK Set, picked by kid (never by the header's jku)."""
    keys = jwt.PyJWKSet.from_dict(httpx.get(url + "/.well-known/jwks.json", timeout=10).json())

    def provide(kid: str | None, jku: str | None):
        for key in keys.keys:
            if key.key_id == kid:
                return key
        raise jwt.PyJWKError(f"no key {kid!r}")

    return provide


@pytest.mark.parametrize("name", ["hybrid", "v1"])
def test_the_sdk_verifies_our_public_card(name: str) -> None:
    url, algorithm = server(name)
    data = httpx.get(url + AGENT_CARD_WELL_KNOWN_PATH, timeout=10).json()
    assert ("protocolVersion" in data) == (name == "hybrid"), data.keys()
    assert len(data["signatures"]) == 1
    card = parse_agent_card(copy.deepcopy(data))
    create_signature_verifier(key_provider(url), [algorithm])(card)

    # A card changed on the way is refused.
    data["description"] = "an impostor"
    with pytest.raises(InvalidSignaturesError):
        create_signature_verifier(key_provider(url), [algorithm])(parse_agent_card(data))


@pytest.mark.parametrize("name", ["hybrid", "v1"])
def test_the_sdk_verifies_our_extended_card(name: str) -> None:
    url, algorithm = server(name)
    response = httpx.get(url + "/extendedAgentCard", headers={"X-API-Key": API_KEY}, timeout=10)
    response.raise_for_status()
    data = response.json()
    uris = [e["uri"] for e in data["capabilities"]["extensions"]]
    assert "urn:agent-a2a:tenant:v1" in uris, uris
    create_signature_verifier(key_provider(url), [algorithm])(parse_agent_card(data))


def test_a_card_the_sdk_signs_is_accepted_by_our_verifier(tmp_path: Path) -> None:
    url, _ = server("hybrid")
    if not SERVER_BINARY:
        pytest.fail("A2A_SERVER_BINARY: the agent-a2a binary to run verify-card with")
    card = parse_agent_card(httpx.get(url + AGENT_CARD_WELL_KNOWN_PATH, timeout=10).json())
    del card.signatures[:]
    card.name = "signed by the Python SDK"
    pem = (FIXTURES / "test-only-rs256.pem").read_bytes()
    signer = create_agent_card_signer(
        signing_key=pem,
        protected_header={"alg": "RS256", "kid": "python-1", "typ": "JOSE"},  # type: ignore[typeddict-item]
    )
    signed = signer(card)
    public = jwt.algorithms.RSAAlgorithm.to_jwk(
        load_pem_private_key(pem, password=None).public_key(), as_dict=True
    )
    public.update({"kid": "python-1", "use": "sig", "alg": "RS256"})
    (tmp_path / "card.json").write_text(json.dumps(MessageToDict(signed)))
    (tmp_path / "jwks.json").write_text(json.dumps({"keys": [public]}))

    def verify_card(*extra: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [SERVER_BINARY, "verify-card", "--card", str(tmp_path / "card.json"),
             "--jwks", str(tmp_path / "jwks.json"), *extra],
            capture_output=True, text=True, timeout=30, check=False,
        )

    accepted = verify_card()
    assert accepted.returncode == 0, accepted.stderr
    refused = verify_card("--algorithms", "ES256")
    assert refused.returncode == 1, refused.stdout

    tampered = MessageToDict(signed)
    tampered["description"] = "changed after signing"
    (tmp_path / "card.json").write_text(json.dumps(tampered))
    refused = verify_card()
    assert refused.returncode == 1 and "no signature" in refused.stderr, refused.stderr
