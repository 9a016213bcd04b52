"""Provider names a nanobot config may use, and nanobot's ``"provider": "auto"`` inference.

A nanobot ``config.json`` names providers by nanobot's registry (``deepseek``,
``lmStudio``, ``custom``…) and usually leaves ``agents.defaults.provider`` at ``"auto"``.
This module holds the facts hippobot needs about those names (wire protocol, default base
URL, how model names are matched and sent) and picks the provider the way nanobot does,
so a copied config talks to the same endpoint.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from hippobot.config.keys import normalise_key
from hippobot.config.schema import ProviderConfig

__all__ = ["PROVIDER_SPECS", "ProviderSpec", "find_entry", "find_spec", "match_provider", "wire_model"]

Backend = Literal["openai", "anthropic", "unsupported"]


@dataclass(frozen=True, slots=True)
class ProviderSpec:
    name: str
    keywords: tuple[str, ...]
    backend: Backend
    api_base: str | None
    gateway: bool = False
    local: bool = False
    direct: bool = False
    """Needs no API key to be chosen (the user supplies everything)."""
    strip_prefix: bool = False
    """Send only the part of the model name after its last ``/``."""
    base_keyword: str = ""
    """A local server recognised by its base URL (``11434`` for Ollama)."""


def _s(name: str, keywords: str, backend: Backend = "openai", api_base: str | None = None,
       flags: str = "", base_keyword: str = "") -> ProviderSpec:
    return ProviderSpec(
        name, tuple(keywords.split()), backend, api_base or None,
        gateway="G" in flags, local="L" in flags, direct="D" in flags,
        strip_prefix="S" in flags, base_keyword=base_keyword,
    )


# nanobot's registry order matters: it is the match priority (gateways first). Backends
# hippobot does not speak (Azure, Bedrock, OAuth logins) are listed so they are named in
# the error instead of being mistaken for OpenAI-compatible ones.
PROVIDER_SPECS: tuple[ProviderSpec, ...] = (
    _s("custom", "", flags="D"),
    _s("azure_openai", "azure azure-openai", "unsupported", flags="D"),
    _s("bedrock", "bedrock anthropic.claude amazon.nova", "unsupported", flags="D"),
    _s("openrouter", "openrouter", api_base="https://openrouter.ai/api/v1", flags="G"),
    _s("orcarouter", "orcarouter", api_base="https://api.orcarouter.ai/v1", flags="G"),
    _s("edenai", "edenai", api_base="https://api.edenai.run/v3", flags="G"),
    _s("opencode", "opencode/ opencode opencode-zen opencode_zen", api_base="https://opencode.ai/zen/v1", flags="G"),
    _s("opencode_zen", "opencode/ opencode_zen opencode-zen", api_base="https://opencode.ai/zen/v1", flags="G"),
    _s("opencode_go", "opencode-go opencode_go", api_base="https://opencode.ai/zen/go/v1", flags="G"),
    _s("huggingface", "huggingface hugging-face", api_base="https://router.huggingface.co/v1", flags="G"),
    _s("skywork", "skywork skyclaw apifree", api_base="https://api.apifree.ai/agent/v1", flags="G"),
    _s("aihubmix", "aihubmix", api_base="https://aihubmix.com/v1", flags="GS"),
    _s("siliconflow", "siliconflow", api_base="https://api.siliconflow.cn/v1", flags="G"),
    _s("novita", "novita", api_base="https://api.novita.ai/openai", flags="G"),
    _s("volcengine", "volcengine volces ark", api_base="https://ark.cn-beijing.volces.com/api/v3", flags="G"),
    _s("volcengine_coding_plan", "volcengine-plan", api_base="https://ark.cn-beijing.volces.com/api/coding/v3", flags="GS"),
    _s("byteplus", "byteplus", api_base="https://ark.ap-southeast.bytepluses.com/api/v3", flags="GS"),
    _s("byteplus_coding_plan", "byteplus-plan", api_base="https://ark.ap-southeast.bytepluses.com/api/coding/v3", flags="GS"),
    _s("anthropic", "anthropic claude", "anthropic"),
    _s("openai", "openai gpt"),
    _s("openai_codex", "openai-codex", "unsupported"),
    _s("xai_grok", "xai-grok xai_grok", "unsupported"),
    _s("github_copilot", "github_copilot copilot", "unsupported"),
    _s("deepseek", "deepseek", api_base="https://api.deepseek.com/v1"),
    _s("gemini", "gemini gemma", api_base="https://generativelanguage.googleapis.com/v1beta/openai/"),
    _s("zhipu", "zhipu glm zai", api_base="https://open.bigmodel.cn/api/paas/v4"),
    _s("dashscope", "qwen dashscope", api_base="https://dashscope.aliyuncs.com/compatible-mode/v1"),
    _s("modelscope", "modelscope", api_base="https://api-inference.modelscope.cn/v1", flags="G"),
    _s("moonshot", "moonshot kimi", api_base="https://api.moonshot.ai/v1"),
    _s("kimi_coding", "kimi-coding kimi_coding kimi-for-coding", "anthropic", "https://api.kimi.com/coding/v1"),
    _s("minimax", "minimax", api_base="https://api.minimax.io/v1"),
    _s("minimax_anthropic", "minimax_anthropic", "anthropic", "https://api.minimax.io/anthropic"),
    _s("mistral", "mistral magistral ministral codestral devstral", api_base="https://api.mistral.ai/v1"),
    _s("stepfun", "stepfun step", api_base="https://api.stepfun.com/v1"),
    _s("xiaomi_mimo", "xiaomi_mimo mimo", api_base="https://api.xiaomimimo.com/v1"),
    _s("longcat", "longcat", api_base="https://api.longcat.chat/openai/v1"),
    _s("ant_ling", "ant_ling ant-ling ling- ring-", api_base="https://api.ant-ling.com/v1"),
    _s("vllm", "vllm", api_base="http://localhost:8000/v1", flags="L"),
    _s("ollama", "ollama nemotron", api_base="http://localhost:11434/v1", flags="L", base_keyword="11434"),
    _s("lm_studio", "lm-studio lmstudio lm_studio", api_base="http://localhost:1234/v1", flags="L", base_keyword="1234"),
    _s("atomic_chat", "atomic-chat atomic_chat atomicchat", api_base="http://localhost:1337/v1", flags="L", base_keyword="1337"),
    _s("ovms", "openvino ovms", api_base="http://localhost:8000/v3", flags="LD"),
    _s("nvidia", "nvidia nemotron nvapi", api_base="https://integrate.api.nvidia.com/v1"),
    _s("groq", "groq", api_base="https://api.groq.com/openai/v1"),
    _s("qianfan", "qianfan ernie", api_base="https://qianfan.baidubce.com/v2"),
    _s("llamacpp", "llamacpp llama.cpp", api_base="http://localhost:8080/v1", flags="L"),
)
_BY_NAME = {normalise_key(s.name): s for s in PROVIDER_SPECS}


def find_spec(name: str) -> ProviderSpec | None:
    """The registry entry for ``name`` in any spelling (``lmStudio``, ``lm-studio``)."""
    return _BY_NAME.get(normalise_key(name))


def find_entry(providers: Mapping[str, ProviderConfig], name: str) -> tuple[str, ProviderConfig] | None:
    """The ``providers`` entry called ``name``, in any spelling, as written in the file."""
    if name in providers:
        return name, providers[name]
    wanted = normalise_key(name)
    for key, entry in providers.items():
        if normalise_key(key) == wanted:
            return key, entry
    return None


def match_provider(model: str, providers: Mapping[str, ProviderConfig]) -> str | None:
    """nanobot's ``provider: "auto"``: the ``providers`` key to use for ``model``, or None.

    Order, as nanobot: an explicit ``prefix/`` naming a usable provider; a custom entry named
    by the prefix; a provider whose keyword occurs in the model name; a configured local
    server; the first provider (registry order, gateways first) with an API key; the first
    custom entry with an ``apiBase``.
    """
    lower = model.lower()
    normalised = lower.replace("-", "_")
    prefix = lower.split("/", 1)[0] if "/" in lower else ""
    prefixed = find_spec(prefix) if prefix else None

    def entry(spec: ProviderSpec) -> tuple[str, ProviderConfig]:
        return find_entry(providers, spec.name) or (spec.name, ProviderConfig())

    def usable(spec: ProviderSpec, conf: ProviderConfig) -> bool:
        return spec.local or spec.direct or bool(conf.api_key)

    if prefixed is not None:
        key, conf = entry(prefixed)
        if usable(prefixed, conf):
            return key
    if prefix and prefixed is None:
        custom = find_entry(providers, prefix)
        if custom is not None:
            return custom[0]
    for spec in PROVIDER_SPECS:
        key, conf = entry(spec)
        if key not in providers:
            continue
        hit = any(kw in lower or kw.replace("-", "_") in normalised for kw in spec.keywords)
        if not hit:
            continue
        if spec.local and (not conf.api_base or (prefixed is not None and prefixed is not spec)):
            continue
        if usable(spec, conf):
            return key
    if prefixed is None:
        fallback = None
        for spec in PROVIDER_SPECS:
            if not spec.local:
                continue
            found = find_entry(providers, spec.name)
            if found is None or not found[1].api_base:
                continue
            if spec.base_keyword and spec.base_keyword in found[1].api_base:
                return found[0]
            fallback = fallback or found[0]
        if fallback:
            return fallback
    for spec in PROVIDER_SPECS:
        found = find_entry(providers, spec.name)
        if found is not None and found[1].api_key and spec.backend != "unsupported":
            return found[0]
    for key, conf in providers.items():
        known = find_spec(key)
        # nanobot stops before ``custom`` here; an endpoint the user configured is a better
        # answer than "no model configured".
        if (known is None and (conf.api_base or conf.api_key)) or (
            known is not None and known.direct and known.backend != "unsupported" and conf.api_base
        ):
            return key
    return None


def wire_model(provider: str, model: str) -> str:
    """The model name as the endpoint expects it (nanobot strips some routing prefixes)."""
    if "/" not in model:
        return model
    spec = find_spec(provider)
    if spec is None:  # a custom entry: ``myproxy/gpt-4o`` is sent as ``gpt-4o``
        head, rest = model.split("/", 1)
        return rest if normalise_key(head) == normalise_key(provider) else model
    if spec.strip_prefix:
        return model.rsplit("/", 1)[-1]
    if spec.backend == "anthropic" and model.startswith("anthropic/"):
        return model[len("anthropic/"):]
    return model
