"""Models by id, and the discovery sources that add and drop some of them."""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable

from sluicegate.core.errors import ErrorKind, SluicegateError
from sluicegate.engines.base import ConfigError
from sluicegate.engines.discovery_sources import DiscoverySource
from sluicegate.engines.instances import Instance
from sluicegate.engines.model_names import ModelNames
from sluicegate.engines.models import NO_HOOKS, Model, ModelHooks
from sluicegate.observe.requests import note_model

log = logging.getLogger(__name__)
NAMES_IN_ERRORS = 20  # how many model names an unknown-model error lists


class Registry:
    """Every model the server serves, by id; configured ones and discovered ones alike."""

    def __init__(self) -> None:
        self.models: dict[str, Model] = {}
        self._hooks = NO_HOOKS
        self.sources: list[DiscoverySource] = []
        self._refreshers: list[asyncio.Task[None]] = []
        self.names = ModelNames()  # aliases and the default model (engines/model_names.py)

    def add(self, model: Model) -> None:
        if model.id in self.models:
            raise ConfigError(f"model id {model.id!r} is declared twice")
        model.hooks = self._hooks
        self.models[model.id] = model

    def set_hooks(self, hooks: ModelHooks) -> None:
        """Let a lifecycle manager hear from every instance, present and future."""
        self._hooks = hooks
        for model in self.models.values():
            model.hooks = hooks

    def find_instance(self, instance_id: str) -> tuple[Model, Instance] | None:
        for model in self.models.values():
            if (instance := model.instance(instance_id)) is not None:
                return model, instance
        return None

    def get(self, model_id: str) -> Model:
        model = self.models.get(model_id)
        if model is None:
            raise SluicegateError(
                ErrorKind.NOT_FOUND,
                f"The model `{model_id}` does not exist. Available models: {self._some_names()}.",
                param="model",
                code="model_not_found",
            )
        note_model(model_id)  # the metrics label and access log of the request asking
        return model

    def _some_names(self) -> str:
        """The first few names: an error is no place for the whole list (`/v1/models` is)."""
        names = list(itertools.islice(self.models, NAMES_IN_ERRORS + 1))
        if not names:
            return "none"
        shown = ", ".join(names[:NAMES_IN_ERRORS])
        return f"{shown}, … (GET /v1/models lists them all)" if len(names) > NAMES_IN_ERRORS else shown

    def resolve(self, requested: str | None, own: Callable[[str], str] | None = None) -> Model:
        """The model a request's model name means (aliases, `default_model`; `own`: the
        dialect's naming): what every route that serves a model asks."""
        if requested:  # a served id, as most requests name it: `names.resolve` and `get` in one
            model = self.models.get(requested)
            if model is not None:
                note_model(requested)
                return model
        return self.get(self.names.resolve(requested, self.models, own))

    async def start(self) -> None:
        """Let every engine start its background work (health checks), and discover the
        models of discovery tables: once now (bounded), then in the background."""
        for model in self.models.values():
            for instance in model.instances:
                await instance.engine.start()
        loop = asyncio.get_running_loop()
        for source in self.sources:
            found = await source.first_discovery(self.models)
            self._refreshers.append(loop.create_task(source.refresh_forever(self.models, found)))

    async def aclose(self) -> None:
        for task in self._refreshers:
            task.cancel()
        await asyncio.gather(*self._refreshers, return_exceptions=True)
        for source in self.sources:
            await source.discovery.aclose()
        for model in self.models.values():
            try:
                for instance in model.instances:
                    await instance.engine.aclose()
            except Exception:
                log.exception("closing model %s failed", model.id)
