"""Which keys of a ``config.json`` hippobot reads, and what to say about the others.

The walk runs over the parsed JSON (not the validated model), next to the schema classes,
so a key is reported with the spelling and dotted path the user wrote
(``agents.defaults.maxTokenz``). Keys nanobot defines but hippobot does not use are
recognised from :data:`NANOBOT_ONLY` and reported apart, once per section, so a nanobot
user who copies their file sees one line instead of a warning per channel token.
"""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import AliasChoices, BaseModel

__all__ = [
    "NANOBOT_ONLY",
    "KeyReport",
    "brief_paths",
    "drop_nulls",
    "group_paths",
    "known_subset",
    "normalise_key",
    "walk_keys",
]

# nanobot's config keys (0.2.x and 0.3.x) that hippobot does not use, as a tree: a leaf
# (None) covers the key and everything under it. camelCase, as nanobot writes them.
_NanobotTree = Mapping[str, "_NanobotTree | None"]
NANOBOT_ONLY: _NanobotTree = {
    "channels": None,
    "gateway": None,
    "api": None,
    "transcription": None,
    "mcpServers": None,
    "agents": {
        "defaults": {
            "contextBlockLimit": None,
            "fallbackModels": None,
            "maxConcurrentSubagents": None,
            "failOnToolError": None,
            "providerRetryMode": None,
            "toolHintMaxLength": None,
            "reasoningEffort": None,
            "timezoneMode": None,
            "botName": None,
            "botIcon": None,
            "unifiedSession": None,
            "disabledSkills": None,
            "idleCompactCheckIntervalSeconds": None,
            "memoryWindow": None,
            "dream": {"maxBatchSize": None, "annotateLineAges": None},
        },
    },
    "tools": {
        "web": None,
        "file": None,
        "cliApps": None,
        "my": None,
        "imageGeneration": None,
        "mcpServers": None,
        "ssrfWhitelist": None,
        "maxSessionMessagesPerMinute": None,
        "webuiAllowLocalServiceAccess": None,
        "webuiAllowRemotePackageInstall": None,
        "exec": {
            "enable": None,
            "pathAppend": None,
            "pathPrepend": None,
            "sandboxRoBinds": None,
            "sandboxRwBinds": None,
            "allowPatterns": None,
            "denyPatterns": None,
            "allowedEnvKeys": None,
        },
    },
    "*preset": {"reasoningEffort": None},
    "*provider": {
        "displayName": None,
        "apiType": None,
        "extraBody": None,
        "extraQuery": None,
        "proxy": None,
        "thinkingStyle": None,
        "region": None,
        "profile": None,
    },
}


# Fields holding named entries, and the part of NANOBOT_ONLY that describes one entry.
_ITEM_TREES = {"providers": "*provider", "model_presets": "*preset"}


def normalise_key(key: str) -> str:
    """``maxTokens``, ``max_tokens`` and ``MaxTokens`` compare equal."""
    return key.replace("_", "").replace("-", "").lower()


@dataclass(frozen=True, slots=True)
class KeyReport:
    """What the walk found: misspelt or unknown keys, and nanobot sections left unused."""

    unknown: tuple[tuple[str, str | None], ...]
    """(dotted path as written, closest known key or None)."""
    nanobot_only: tuple[str, ...]
    """Dotted paths of nanobot settings hippobot ignores, outermost only."""


def _field_names(model: type[BaseModel]) -> dict[str, str]:
    """normalised spelling -> field name, for every name and alias a field accepts."""
    names: dict[str, str] = {}
    for name, info in model.model_fields.items():
        spellings = [name, info.alias or name]
        va = info.validation_alias
        if isinstance(va, str):
            spellings.append(va)
        elif isinstance(va, AliasChoices):
            spellings += [c for c in va.choices if isinstance(c, str)]
        for s in spellings:
            names[normalise_key(s)] = name
    return names


def _display_name(model: type[BaseModel], name: str) -> str:
    return model.model_fields[name].alias or name


def _nested(annotation: Any) -> tuple[str, type[BaseModel]] | None:
    """("model", M) for a field of model type, ("dict", M) for ``dict[str, M]``."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "model", annotation
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin in (dict, Mapping) and len(args) == 2:
        inner = _nested(args[1])
        if inner and inner[0] == "model":
            return "dict", inner[1]
    if origin in (typing.Union, types.UnionType):
        for arg in args:
            inner = _nested(arg)
            if inner:
                return inner
    return None


def _nanobot_child(tree: _NanobotTree | None, key: str) -> tuple[bool, _NanobotTree | None]:
    """(is this key in nanobot's tree, its subtree)."""
    if tree is None:
        return False, None
    for k, sub in tree.items():
        if normalise_key(k) == normalise_key(key):
            return True, sub
    return False, None


def walk_keys(data: Mapping[str, Any], model: type[BaseModel]) -> KeyReport:
    """Compare the parsed file with the schema, recursively."""
    unknown: list[tuple[str, str | None]] = []
    nanobot: list[str] = []
    _walk(data, model, "", NANOBOT_ONLY, unknown, nanobot)
    return KeyReport(tuple(unknown), _collapse_providers(nanobot))


def _collapse_providers(paths: list[str]) -> tuple[str, ...]:
    """``providers.a.apiType, providers.b.apiType`` -> ``providers.*.apiType`` (nanobot writes
    every provider's defaults into its file)."""
    by_leaf: dict[str, list[str]] = {}
    for path in paths:
        parts = path.split(".")
        if len(parts) == 3 and parts[0] in ("providers", "modelPresets"):
            by_leaf.setdefault(f"{parts[0]}.{parts[2]}", []).append(path)
    out: list[str] = []
    for path in paths:
        parts = path.split(".")
        if len(parts) == 3 and len(by_leaf.get(f"{parts[0]}.{parts[2]}", ())) > 1:
            star = f"{parts[0]}.*.{parts[2]}"
            if star not in out:
                out.append(star)
        else:
            out.append(path)
    return tuple(out)


def _walk(
    data: Mapping[str, Any],
    model: type[BaseModel],
    prefix: str,
    nb_tree: _NanobotTree | None,
    unknown: list[tuple[str, str | None]],
    nanobot: list[str],
) -> None:
    names = _field_names(model)
    for key, value in data.items():
        path = f"{prefix}{key}"
        is_nb, nb_sub = _nanobot_child(nb_tree, key)
        field_name = names.get(normalise_key(key))
        if field_name is None:
            if is_nb:
                nanobot.append(path)
            else:
                unknown.append((path, _closest(key, model, nb_tree)))
            continue
        nested = _nested(model.model_fields[field_name].annotation)
        if nested is None or not isinstance(value, Mapping):
            continue
        kind, sub_model = nested
        if kind == "model":
            _walk(value, sub_model, f"{path}.", nb_sub, unknown, nanobot)
        else:
            item_tree = _nanobot_child(NANOBOT_ONLY, _ITEM_TREES.get(field_name, ""))[1]
            for name, item in value.items():
                if isinstance(item, Mapping):
                    _walk(item, sub_model, f"{path}.{name}.", item_tree, unknown, nanobot)


def _closest(key: str, model: type[BaseModel], nb_tree: _NanobotTree | None) -> str | None:
    candidates = [_display_name(model, n) for n in model.model_fields]
    candidates += [k for k in (nb_tree or {}) if not k.startswith("*")]
    match = difflib.get_close_matches(key, candidates, n=1, cutoff=0.6)
    if not match:
        lowered = {c.lower(): c for c in candidates}
        match = difflib.get_close_matches(key.lower(), list(lowered), n=1, cutoff=0.6)
        match = [lowered[m] for m in match]
    return match[0] if match else None


def drop_nulls(data: Any) -> Any:
    """A copy without ``null`` values in objects: nanobot writes ``null`` for "unset", and
    a missing key means the same to hippobot (its default)."""
    if isinstance(data, Mapping):
        return {k: drop_nulls(v) for k, v in data.items() if v is not None}
    if isinstance(data, list):
        return [drop_nulls(v) for v in data]
    return data


def known_subset(data: Mapping[str, Any], model: type[BaseModel]) -> dict[str, Any]:
    """The part of ``data`` the schema reads, with the user's spelling kept (for writing a
    config translated from nanobot's: hippobot's keys only, nothing it would warn about)."""
    names = _field_names(model)
    out: dict[str, Any] = {}
    for key, value in data.items():
        field_name = names.get(normalise_key(key))
        if field_name is None or value is None:
            continue
        nested = _nested(model.model_fields[field_name].annotation)
        if nested is not None and isinstance(value, Mapping):
            kind, sub_model = nested
            if kind == "model":
                out[key] = known_subset(value, sub_model)
            else:
                out[key] = {
                    name: known_subset(item, sub_model)
                    for name, item in value.items()
                    if isinstance(item, Mapping)
                }
        else:
            out[key] = value
    return out


def group_paths(paths: tuple[str, ...] | list[str]) -> str:
    """``a.b.x, a.b.y, c`` -> ``a.b.{x, y}, c``: one short line for many sibling keys."""
    groups: dict[str, list[str]] = {}
    for path in paths:
        parent, _, leaf = path.rpartition(".")
        groups.setdefault(parent, []).append(leaf)
    parts = []
    for parent, leaves in groups.items():
        if not parent:
            parts += leaves
        elif len(leaves) == 1:
            parts.append(f"{parent}.{leaves[0]}")
        else:
            parts.append(f"{parent}.{{{', '.join(leaves)}}}")
    return ", ".join(parts)


_SECTION_DEPTH = {"agents": 2, "providers": 2, "modelPresets": 2}


def brief_paths(paths: tuple[str, ...] | list[str], limit: int = 320) -> str:
    """:func:`group_paths`, or past ``limit`` characters one entry per section with its
    count (``tools.{web, file, +16 more}``), so a whole nanobot file is one short line."""
    full = group_paths(paths)
    if len(full) <= limit:
        return full
    sections: dict[str, list[str]] = {}
    for path in paths:
        parts = path.split(".")
        depth = _SECTION_DEPTH.get(parts[0], 1)
        section = ".".join(parts[:depth]) if len(parts) > depth else path
        sections.setdefault(section, []).append(path)
    shown = []
    for section, members in sections.items():
        if len(members) == 1:
            shown.append(members[0])
            continue
        leaves = [m[len(section) + 1 :] for m in members]
        more = f", +{len(leaves) - 2} more" if len(leaves) > 2 else ""
        shown.append(f"{section}.{{{', '.join(leaves[:2])}{more}}}")
    line = ", ".join(shown)
    if len(line) > limit:
        cut = line[:limit].rsplit(", ", 1)[0]
        line = f"{cut}, and {len(shown) - cut.count(', ') - 1} more sections"
    return line
