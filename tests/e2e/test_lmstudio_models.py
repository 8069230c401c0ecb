"""The LM Studio models API: list, load (a second instance gets `:2`), unload (downloads:
test_models_download.py)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from lmstudio_support import (
    JIT_LOAD_SECONDS,
    MAIN_MODELS,
    assert_lmstudio_error,
    lms,
    lms_server,
    stream_chat,
)

pytestmark = pytest.mark.e2e
__all__ = ["lms", "lms_server"]  # fixtures

REASONING_OPTIONS = {"off", "low", "medium", "high", "on"}
MODEL_KEYS = {
    "type",
    "publisher",
    "key",
    "display_name",
    "architecture",
    "quantization",
    "size_bytes",
    "params_string",
    "loaded_instances",
    "max_context_length",
    "format",
    "capabilities",
}
OPTIONAL_MODEL_KEYS = {"description", "variants", "selected_variant"}
# Sluicegate's own additions, documented in docs/models.md (LM Studio's clients ignore them):
# the engine that serves a model, and when an idle instance's TTL unloads it.
EXTENSION_MODEL_KEYS = {"engine"}
EXTENSION_INSTANCE_KEYS = {"unloads_in_seconds"}


def models_by_key(client: httpx.Client) -> dict[str, dict[str, Any]]:
    response = client.get("/api/v1/models")
    assert response.status_code == 200, response.text
    body = response.json()
    assert set(body) == {"models"}
    return {m["key"]: m for m in body["models"]}


def instance_ids(client: httpx.Client, key: str) -> list[str]:
    return [i["id"] for i in models_by_key(client)[key]["loaded_instances"]]


def check_model(model: dict[str, Any]) -> None:
    assert MODEL_KEYS <= set(model) <= MODEL_KEYS | OPTIONAL_MODEL_KEYS | EXTENSION_MODEL_KEYS, sorted(model)
    assert model["type"] in ("llm", "embedding")
    for key in ("publisher", "key", "display_name"):
        assert isinstance(model[key], str) and model[key], (key, model)
    for key in ("architecture", "params_string"):
        assert model[key] is None or isinstance(model[key], str), (key, model)
    quantization = model["quantization"]
    assert quantization is None or set(quantization) == {"name", "bits_per_weight"}, quantization
    assert isinstance(model["size_bytes"], int) and model["size_bytes"] >= 0
    assert isinstance(model["max_context_length"], int) and model["max_context_length"] > 0
    assert model["format"] in ("gguf", "mlx", None)
    for instance in model["loaded_instances"]:
        assert {"id", "config"} <= set(instance) <= {"id", "config"} | EXTENSION_INSTANCE_KEYS, instance
        assert isinstance(instance["id"], str) and instance["id"].startswith(model["key"])
        assert isinstance(instance["config"]["context_length"], int)
        assert instance["config"]["context_length"] <= model["max_context_length"]
    capabilities = model["capabilities"]
    assert set(capabilities) <= {"vision", "trained_for_tool_use", "reasoning"}, capabilities
    assert isinstance(capabilities["vision"], bool)
    assert isinstance(capabilities["trained_for_tool_use"], bool)
    if "reasoning" in capabilities:
        reasoning = capabilities["reasoning"]
        assert set(reasoning) == {"allowed_options", "default"}, reasoning
        assert reasoning["allowed_options"] and set(reasoning["allowed_options"]) <= REASONING_OPTIONS
        assert reasoning["default"] in reasoning["allowed_options"]


def test_the_model_list_has_the_documented_shape(lms: httpx.Client) -> None:
    models = models_by_key(lms)

    assert set(models) == {m["id"] for m in MAIN_MODELS}
    for model in models.values():
        check_model(model)
    chat = models["lms-chat"]  # loaded when the server started
    assert chat["type"] == "llm"
    assert chat["loaded_instances"][0]["id"] == "lms-chat"
    assert chat["capabilities"]["reasoning"] == {"allowed_options": ["off", "on"], "default": "on"}
    assert chat["capabilities"]["trained_for_tool_use"] is True
    assert chat["capabilities"]["vision"] is True  # the scripted engine takes (and ignores) images
    assert models["lms-idle"]["loaded_instances"] == []  # never used: never loaded


def test_load_a_second_instance_and_unload_both(lms: httpx.Client) -> None:
    model = "lms-instances"
    assert instance_ids(lms, model) == []

    first = lms.post("/api/v1/models/load", json={"model": model})
    assert first.status_code == 200, first.text
    body = first.json()
    assert set(body) == {"type", "instance_id", "load_time_seconds", "status"}
    assert body["type"] == "llm" and body["instance_id"] == model and body["status"] == "loaded"
    assert JIT_LOAD_SECONDS * 0.75 <= body["load_time_seconds"] < 30
    assert instance_ids(lms, model) == [model]

    second = lms.post(
        "/api/v1/models/load", json={"model": model, "context_length": 4096, "echo_load_config": True}
    )
    assert second.status_code == 200, second.text
    body = second.json()
    assert set(body) == {"type", "instance_id", "load_time_seconds", "status", "load_config"}
    assert body["instance_id"] == f"{model}:2" and body["status"] == "loaded"
    assert body["load_config"]["context_length"] == 4096
    assert instance_ids(lms, model) == [model, f"{model}:2"]
    # The context length asked for is the instance's own: the list shows what the load echoed,
    # and the first instance (loaded without one) keeps the model's default.
    listed = models_by_key(lms)[model]
    check_model(listed)
    configs = {i["id"]: i["config"] for i in listed["loaded_instances"]}
    assert configs[f"{model}:2"] == body["load_config"]
    assert configs[model]["context_length"] == listed["max_context_length"]

    unloaded = lms.post("/api/v1/models/unload", json={"instance_id": f"{model}:2"})
    assert unloaded.status_code == 200, unloaded.text
    assert unloaded.json() == {"instance_id": f"{model}:2"}
    assert instance_ids(lms, model) == [model]
    again = lms.post("/api/v1/models/unload", json={"instance_id": f"{model}:2"})
    assert_lmstudio_error(again, 404, type="model_not_found", code="model_not_found", param="instance_id")

    assert lms.post("/api/v1/models/unload", json={"instance_id": model}).json() == {"instance_id": model}
    assert instance_ids(lms, model) == []

    # Unloaded: the next chat loads it just in time, and says so.
    stream = stream_chat(lms, {"model": model, "input": "Hello?"})
    assert stream.names[:2] == ["chat.start", "model_load.start"]
    assert stream.result["model_instance_id"] == model
    assert "model_load_time_seconds" in stream.result["stats"]
    assert instance_ids(lms, model) == [model]


def test_loading_an_unknown_model_is_model_not_found(lms: httpx.Client) -> None:
    response = lms.post("/api/v1/models/load", json={"model": "no-such-model"})
    assert_lmstudio_error(
        response,
        404,
        type="model_not_found",
        code="model_not_found",
        param="model",
        mentions=("no-such-model",),
    )
    response = lms.post("/api/v1/models/unload", json={"instance_id": "no-such-model"})
    assert_lmstudio_error(response, 404, type="model_not_found", code="model_not_found", param="instance_id")


@pytest.mark.parametrize(
    ("path", "body", "param", "code"),
    [
        ("/api/v1/models/load", {"model": "lms-idle", "ttl": 60}, "ttl", "unrecognized_keys"),
        ("/api/v1/models/load", {"model": "lms-idle", "stream": True}, "stream", "unrecognized_keys"),
        ("/api/v1/models/load", {}, "model", "missing_required_parameter"),
        ("/api/v1/models/load", {"model": "lms-idle", "context_length": "big"}, "context_length", None),
        (
            "/api/v1/models/load",
            {"model": "lms-idle", "context_length": 10**9},
            "context_length",
            "invalid_value",
        ),
        ("/api/v1/models/unload", {"instance_id": "lms-idle", "force": True}, "force", "unrecognized_keys"),
        ("/api/v1/models/unload", {}, "instance_id", "missing_required_parameter"),
    ],
)
def test_bad_load_and_unload_bodies_are_400s(
    lms: httpx.Client, path: str, body: dict[str, Any], param: str, code: str | None
) -> None:
    assert_lmstudio_error(lms.post(path, json=body), 400, code=code, param=param)
    assert instance_ids(lms, "lms-idle") == []
