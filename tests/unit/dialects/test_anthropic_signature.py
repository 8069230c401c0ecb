from __future__ import annotations

from sluicegate.dialects.anthropic.signature import ThinkingSigner


def test_sign_and_verify() -> None:
    signer = ThinkingSigner(b"a" * 32)
    signature = signer.sign("why")
    assert signer.verify("why", signature) == "why"
    assert signer.verify("why not", signature) is None
    assert ThinkingSigner(b"b" * 32).verify("why", signature) is None
    assert signer.verify("why", "garbage") is None
    assert signer.verify("why", signature[:-3] + "!!!") is None


def test_embedded_text_is_recovered_only_untampered() -> None:
    signer = ThinkingSigner(b"a" * 32)
    signature = signer.sign("secret plan", embed=True)
    assert "secret plan" not in signature
    assert signer.verify("", signature) == "secret plan"
    assert signer.verify("secret plan", signature) == "secret plan"
    assert signer.verify("other", signature) is None
    forged = ThinkingSigner(b"b" * 32).sign("evil", embed=True)
    assert signer.verify("", forged) is None
