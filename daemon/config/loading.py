"""Reading a config file and turning its TOML into a checked Config: a bad section, key or value
fails at start with the file, the key, the value and what is allowed.
"""

from __future__ import annotations

import ast
import dataclasses
import os
import re
import sys
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

from daemon.analysis.kinds import KINDS
from daemon.config.checks import check_energy, check_instance_price, check_pricing
from daemon.config.cost_tables import check_budgets, latency_setting, unit_cost_setting
from daemon.config.sections import SECTIONS, Config
from daemon.config.values import (
    check_http_url,
    did_you_mean,
    format_duration,
    format_size,
    parse_address,
    parse_duration,
    parse_s3_url,
    parse_size,
    toml_key,
    toml_value,
)
from daemon.sources.patterns import job_pattern
from daemon.sources.redact import redact_text
from pricing.small_file import NOT_REGULAR, TOO_LARGE, UNREADABLE, SmallFileError, read_small_file

DEFAULT_CONFIG_PATH = Path("/etc/mlcost/mlcostd.toml")
MAX_CONFIG_BYTES = 1 << 20  # a config is a few kB; this bound keeps /dev/zero out of memory


class ConfigError(ValueError):
    """A config file that cannot be used; the message names the key, the value and what fits."""


def load(path: str | os.PathLike[str] | None) -> Config:
    """Read a config file; None reads the default path if it exists, else returns defaults."""
    if path is None:
        if not DEFAULT_CONFIG_PATH.exists():
            return Config()
        path = DEFAULT_CONFIG_PATH
    return from_dict(parse_file(Path(path)), where=str(path))


def parse_file(path: Path) -> dict[str, Any]:
    """The TOML in `path`, read only if it is a regular file of at most MAX_CONFIG_BYTES
    (pricing.small_file: a FIFO would block the start, /dev/zero would fill memory).
    ConfigError says what is wrong."""
    try:
        raw = read_small_file(path, MAX_CONFIG_BYTES)
    except SmallFileError as exc:
        if exc.kind == UNREADABLE:
            raise ConfigError(f"cannot read config file {path}{exc}") from None
        fix = {NOT_REGULAR: "; pass --config with a TOML file",
               TOO_LARGE: "; is it the right file?"}.get(exc.kind, "")
        raise ConfigError(f"config file {path}{exc}{fix}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[:exc.start].count(b"\n") + 1
        raise ConfigError(f"{path}: not UTF-8 text (byte {raw[exc.start]:#04x} on line "
                          f"{line}); save the file as UTF-8") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {toml_error(exc)}") from None
    return data


# A key as tomllib's errors show it: a Python tuple of its parts, ('daemon',) or ('a', 'b c').
_PY_KEY = re.compile(r"""\((?:'[^'\\]*'|"[^"\\]*")(?:, (?:'[^'\\]*'|"[^"\\]*"))*,?\)""")


def toml_error(error: Exception) -> str:
    """tomllib's message with the keys in it as TOML spells them: "Cannot declare ('daemon',)
    twice" read as Python; "Cannot declare [daemon] twice" is what the file says (probe 155
    L3). A table header is shown in brackets, another key as a dotted key."""
    message = str(error)

    def spelled(found: re.Match[str]) -> str:
        try:
            parts = ast.literal_eval(found.group(0))
        except (ValueError, SyntaxError):
            return found.group(0)
        if not isinstance(parts, tuple) or not all(isinstance(p, str) for p in parts):
            return found.group(0)
        return ".".join(toml_key(part) for part in parts)

    if message.startswith("Cannot declare "):  # a [table] or [[array]] header given twice
        return _PY_KEY.sub(lambda found: f"[{spelled(found)}]", message, count=1)
    return _PY_KEY.sub(spelled, message)



def _shown(value: Any) -> str:
    """A refused value as an error shows it: a secret in it (a URL's user and password, a
    token in its query, s3://KEY:SECRET@...) hidden, and at most 200 characters."""
    return redact_text(toml_value(value))[:200]


def _convert(section: str, f: dataclasses.Field, value: Any, where: str) -> Any:
    meta = f.metadata
    kind, low, high, choices = meta["kind"], meta["low"], meta["high"], meta["choices"]
    key = f"[{section}].{f.name}"
    try:
        if kind == "duration":
            result: Any = parse_duration(value)
        elif kind == "size":
            result = parse_size(value)
        elif kind == "table":
            if not isinstance(value, dict):
                raise ValueError("must be a table")
            result = value
        elif kind == "tables":
            if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
                raise ValueError("must be a list of tables ([[...]] in TOML)")
            result = value
        elif kind == "list":
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise ValueError("must be a list of strings")
            result = value
        elif kind == "s3":
            if not isinstance(value, str):
                raise ValueError("must be a string")
            if value:
                parse_s3_url(value)
            result = value
        elif kind == "address":
            if not isinstance(value, str):
                raise ValueError("must be a string")
            if value:
                parse_address(value)
            result = value
        elif kind == "bool":
            if not isinstance(value, bool):
                raise ValueError("must be true or false")
            result = value
        elif kind == "number":
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError("must be a number")
            result = float(value)
        else:
            if not isinstance(value, str):
                raise ValueError("must be a string")
            result = value
    except ValueError as exc:
        raise ConfigError(f"{where}: {key} = {_shown(value)}: {exc}; {meta['help']}") from None
    if choices and result not in choices:
        allowed = ", ".join(repr(c) for c in choices if c) + (" or empty" if "" in choices else "")
        raise ConfigError(f"{where}: {key} = {_shown(value)}: allowed values are {allowed}")
    if low is not None and not (low <= result <= high):
        # in the units a value is written in: a size's bounds read "1.04858e+06 and
        # 1.75922e+13 bytes" (probe 149 L1)
        if kind == "size":
            bounds = f"{format_size(low)} and {format_size(high)}"
        elif kind == "duration" and high >= 1e6:
            bounds = f"{format_duration(low)} and {format_duration(high)}"
        else:
            bounds = f"{low:g} and {high:g}{' seconds' if kind == 'duration' else ''}"
        raise ConfigError(
            f"{where}: {key} = {_shown(value)}: must be between {bounds} ({meta['help']})")
    return result


def _section_meant(name: str) -> str:
    """The section a mistyped one means: [deamon] -> [daemon]."""
    return did_you_mean(name, list(SECTIONS), lambda found: f"[{found}]")


def _key_meant(section: str, key: str) -> str:
    """The key a mistyped one means: a close one in its section ([daemon].log_levle ->
    log_level), else the same key in the section that has it ([daemon].raw_retention ->
    [store].raw_retention)."""
    keys = [f.name for f in dataclasses.fields(SECTIONS[section])]
    close = did_you_mean(key, keys)
    if close:
        return close
    for other, cls in SECTIONS.items():
        if other != section and key in {f.name for f in dataclasses.fields(cls)}:
            return f" (did you mean [{other}].{key}?)"
    return ""


def from_dict(data: dict[str, Any], where: str = "config") -> Config:
    """Build a Config from parsed TOML, rejecting unknown sections and keys."""
    sections: dict[str, Any] = {}
    for name, body in data.items():
        if name not in SECTIONS:
            raise ConfigError(
                f"{where}: unknown section [{toml_key(name)}]{_section_meant(name)}; allowed "
                f"sections: {', '.join(SECTIONS)}")
        if not isinstance(body, dict):
            raise ConfigError(f"{where}: [{name}] must be a table, got {_shown(body)}")
        cls = SECTIONS[name]
        known = {f.name: f for f in dataclasses.fields(cls)}
        values = {}
        for key, value in body.items():
            if key not in known:
                raise ConfigError(
                    f"{where}: unknown key [{name}].{toml_key(key)}{_key_meant(name, key)}; "
                    f"allowed keys in [{name}]: {', '.join(known)}")
            values[key] = _convert(name, known[key], value, where)
        sections[name] = cls(**values)
    config = Config(**sections, source=where)
    try:
        check_budgets(config.cost.budgets)
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    for number, meter in enumerate(config.cost.unit_costs, start=1):
        try:
            unit_cost_setting(meter)
        except ValueError as exc:
            raise ConfigError(f"{where}: [[cost.unit_costs]] #{number}: {exc}") from None
    for number, histogram in enumerate(config.cost.latency, start=1):
        try:
            latency_setting(histogram)
        except ValueError as exc:
            raise ConfigError(f"{where}: [[cost.latency]] #{number}: {exc}") from None
    for name, pattern in config.cost.jobs.items():
        try:
            job_pattern(pattern)
        except ValueError as exc:
            raise ConfigError(f"{where}: [cost.jobs].{toml_key(name)} = {str(pattern)[:200]!r}: "
                              f"{exc}") from None
    for name, kind in config.kinds.jobs.items():
        if kind not in KINDS:
            raise ConfigError(f"{where}: [kinds.jobs].{toml_key(name)} = {kind!r}: not a "
                              "workload kind; "
                              f"allowed values are {', '.join(repr(k) for k in KINDS)}")
    if config.nvml.dcgm_exporter_url:
        try:
            check_http_url("[nvml].dcgm_exporter_url", config.nvml.dcgm_exporter_url,
                           "dcgm-exporter's /metrics (e.g. http://localhost:9400/metrics)")
        except ValueError as exc:
            raise ConfigError(f"{where}: {exc}") from None
    try:
        check_energy(config.energy)
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    if config.attribution.high_sm_share < config.attribution.low_sm_share:
        raise ConfigError(
            f"{where}: [attribution].high_sm_share = {config.attribution.high_sm_share:g} is "
            f"below low_sm_share = {config.attribution.low_sm_share:g}; it must be at least that")
    if config.attribution.mid_sm_share and (
            config.attribution.mid_sm_share <= config.attribution.high_sm_share):
        raise ConfigError(
            f"{where}: [attribution].mid_sm_share = {config.attribution.mid_sm_share:g} is not "
            f"above high_sm_share = {config.attribution.high_sm_share:g}; the middle band lies "
            "between them (0 turns it off)")
    try:
        check_instance_price(config.instance)
        check_pricing(config.pricing)
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    if config.nvml.retry_max < config.nvml.retry_initial:
        raise ConfigError(
            f"{where}: [nvml].retry_max = {config.nvml.retry_max:g} is below "
            f"[nvml].retry_initial = {config.nvml.retry_initial:g}; it must be at least as long")
    return config
