"""`mlcostd prices`: the catalog as a table or JSON, what fits a workload, live refresh from
AWS, Azure, GCP and the SkyPilot catalogs, the sanity audit, and managed-platform markups.

The daemon's CLI wires this in with `add_arguments(subparser)` and `run(args)`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, TextIO
from urllib.parse import urlsplit

from pricing.cache import default_cache_path, read_cache
from pricing.catalog import Catalog, InstanceOffer, Price, PricingError
from pricing.offer import HOURS_PER_MONTH, age_days, normalize_instance_type
from pricing.staleness import STALE_AFTER_DAYS, price_staleness

EXIT_OK = 0
EXIT_REFRESH_FAILED = 1  # the table is still printed; some or all live prices are missing
EXIT_USAGE = 2
REFRESH_SOURCES = ("aws", "azure", "gcp", "catalog", "sagemaker", "vertex", "azureml")
MANAGED_SOURCES = ("sagemaker", "vertex", "azureml")  # refreshes of managed-platform prices
DEFAULT_HEADROOM = 0.1  # --fits: memory fraction left free
DEFAULT_LIMIT = 10  # --fits, --observed: rows shown

# Which flag goes with which (`--headroom` means nothing without `--fits`): given without its
# main flag, a companion is refused (exit 2), never silently ignored. The flag, its dest, and
# the main flag(s) as the message names them; MAIN_GIVEN says whether those were given. The
# --observed flags are the daemon's CLI's (absent from a parser without them).
COMPANIONS: tuple[tuple[str, str, str], ...] = (
    ("--gpus", "gpus", "--fits GIB"),
    ("--spot", "spot", "--fits GIB"),
    ("--headroom", "headroom", "--fits GIB"),
    ("--limit", "limit", "--fits GIB or --observed"),
    ("--hours-per-month", "hours_per_month", "--managed"),
    ("--catalog-url", "catalog_url", "--refresh catalog"),
    ("--gcp-key-file", "gcp_key_file", "--refresh gcp or --refresh vertex"),
    ("--pid", "pid", "--observed"),
    ("--run-hours", "run_hours", "--observed"),
    ("--since", "since", "--observed"),
    ("--until", "until", "--observed"),
    ("--kind", "kind", "--observed"),
    ("--db", "db", "--observed"),
)
MAIN_GIVEN: dict[str, Any] = {
    "--fits GIB": lambda a: a.fits is not None,
    "--fits GIB or --observed": lambda a: a.fits is not None or getattr(a, "observed", False),
    # the managed comparison: --managed, or a managed refresh with --instance (it shows it)
    "--managed": lambda a: a.managed or (a.refresh in MANAGED_SOURCES and bool(a.instance)),
    "--refresh catalog": lambda a: a.refresh == "catalog",
    "--refresh gcp or --refresh vertex": lambda a: a.refresh in ("gcp", "vertex"),
    "--observed": lambda a: getattr(a, "observed", False),
}
GCP_KEY_FILE_ENV = "MLCOST_GCP_API_KEY_FILE"
# Past this many offers the stale warnings fold into one line.
MAX_STALE_LINES = 5
DEFAULT_REGIONS = {"aws": "us-east-1", "azure": "eastus", "gcp": "us-central1",
                   "sagemaker": "us-east-1", "vertex": "us-central1", "azureml": "eastus"}
# Each --refresh source's provider (whose instance types its --instance names) and what it is.
REFRESH_PROVIDERS = {"aws": "aws", "azure": "azure", "gcp": "gcp", "sagemaker": "aws",
                     "vertex": "gcp", "azureml": "azure"}
PROVIDER_TYPE_NAMES = {"aws": "an AWS instance type", "azure": "an Azure size",
                       "gcp": "a GCP machine type", "lambda": "a Lambda Cloud instance type"}
SERVICE_NAMES = {"aws": "AWS", "azure": "Azure", "gcp": "GCP", "sagemaker": "SageMaker",
                 "vertex": "Vertex AI", "azureml": "Azure ML"}


def number_in(low: float, high: float, *, whole: bool = False) -> Any:
    """An argparse `type` for a number from `low` to `high` (a whole one with `whole`): inf,
    nan and anything outside are refused with the value and the range, never taken as given."""

    def parse(text: str) -> float | int:
        try:
            value: float | int = int(text) if whole else float(text)
        except ValueError:
            value = math.nan
        if not (math.isfinite(value) and low <= value <= high):
            kind = "a whole number" if whole else "a number"
            shown = (f"{int(low)} to {int(high)}" if whole  # (4194304, not 4.1943e+06)
                     else f"{low:g} to {high:g}")
            raise argparse.ArgumentTypeError(f"{text[:40]!r} is not {kind} from {shown}")
        return value

    return parse


# Memory size units --fits reads, in GiB. GPU memory is sold in GiB called GB (an "80GB" H100
# holds 80 GiB), so GB and G are read as GiB too.
_GIB_PER_UNIT = {"": 1.0, "g": 1.0, "gb": 1.0, "gib": 1.0, "m": 1 / 1024, "mb": 1 / 1024,
                 "mib": 1 / 1024, "t": 1024.0, "tb": 1024.0, "tib": 1024.0}


def gib_size(low: float, high: float) -> Any:
    """An argparse `type` for a memory size in GiB: 70, 70GiB, 70G, 70GB (read as GiB),
    512MiB, 1.5TiB; from `low` to `high` GiB."""

    def parse(text: str) -> float:
        stripped = text.strip()
        number = stripped.rstrip("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ ")
        unit = _GIB_PER_UNIT.get(stripped[len(number):].strip().lower())
        try:
            value = float(number) * unit if unit is not None else math.nan
        except ValueError:
            value = math.nan
        if not (math.isfinite(value) and low <= value <= high):
            raise argparse.ArgumentTypeError(
                f"{text[:40]!r} is not a memory size from {low:g} to {high:g} GiB: give GiB, "
                "as 70 or 70GiB (also 70G or 70GB, read as GiB; 512MiB; 1.5TiB)")
        return value

    return parse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the `prices` options to `parser`."""
    parser.add_argument("--provider", help="only this cloud: aws, gcp, azure, lambda, or a "
                        "provider of a [pricing].extra_catalogs sheet (--config)")
    parser.add_argument("--accelerator", help="only this accelerator, e.g. H100, A100, L40S")
    parser.add_argument("--region", help="only this region (with --refresh: the region to fetch)")
    parser.add_argument("--instance", nargs="+", action="extend", metavar="TYPE",
                        help="only these instance types (with --refresh: the types to fetch)")
    parser.add_argument("--fits", type=gib_size(0, 100_000), metavar="GIB",
                        help="cheapest instances whose accelerators each hold GIB of memory "
                             "(plus --headroom): 70 or 70GiB (also 70G or 70GB, read as GiB; "
                             "512MiB; 1.5TiB)")
    parser.add_argument("--gpus", type=number_in(1, 4096, whole=True), default=None, metavar="N",
                        help="with --fits: at least N accelerators (default 1)")
    parser.add_argument("--spot", action="store_true",
                        help="with --fits: rank by spot price instead of on-demand")
    parser.add_argument("--headroom", type=number_in(0, 10), default=None,
                        help="with --fits: extra memory fraction to leave free (default "
                             f"{DEFAULT_HEADROOM:g})")
    parser.add_argument("--limit", type=number_in(1, 10_000, whole=True), default=None,
                        help=f"with --fits (or --observed): rows (default {DEFAULT_LIMIT})")
    parser.add_argument("--refresh", choices=REFRESH_SOURCES,
                        help="fetch live prices first: aws (Price List + spot history, needs "
                             "credentials), azure (Retail Prices API, no key), gcp (Cloud "
                             "Billing Catalog, API key file), catalog (SkyPilot vms.csv for "
                             "aws, gcp, azure, lambda; no key), sagemaker, vertex (API key "
                             "file), azureml (no key): managed-platform prices for --managed")
    parser.add_argument("--catalog-url", metavar="URL", default=None,
                        help="with --refresh catalog: base URL of the SkyPilot catalogs "
                             "(default [pricing].catalog_url of --config, else the public "
                             "skypilot-catalog repository)")
    parser.add_argument("--gcp-key-file", metavar="FILE", default=None,
                        help=f"with --refresh gcp or vertex: file holding the API key, mode 0600 "
                             f"(default [pricing].gcp_api_key_file of --config, else "
                             f"${GCP_KEY_FILE_ENV})")
    parser.add_argument("--audit", action="store_true",
                        help="list the rows and prices the sanity rules left out, with reasons")
    parser.add_argument("--managed", action="store_true",
                        help="with --instance TYPE: what SageMaker, Vertex AI and Azure ML "
                             "charge for that hardware (its accelerators and their count) "
                             "against the same hardware self-managed: monthly difference and "
                             "markup")
    parser.add_argument("--hours-per-month", type=number_in(0, 744), default=None,
                        metavar="H", help="with --managed: hours the workload runs a month "
                                          f"(default {HOURS_PER_MONTH:g})")
    parser.add_argument("--cache", default=None, metavar="FILE",
                        help=f"live price cache (default: [pricing].cache of the config, "
                             f"else {default_cache_path()})")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


def run(args: argparse.Namespace, *, out: TextIO | None = None, err: TextIO | None = None,
        session: Any = None, pricing_client: Any = None, ec2_client: Any = None) -> int:
    """Run `mlcostd prices`; returns the exit status. The client arguments are for tests."""
    out = out or sys.stdout
    err = err or sys.stderr
    cache_path = args.cache or str(default_cache_path())

    usage_error = _check_usage(args)
    if usage_error:
        print(f"mlcostd prices: {usage_error}", file=err)
        return EXIT_USAGE

    status = EXIT_OK
    refresh_report: dict[str, Any] | None = None
    if args.refresh in ("azure", "gcp", "catalog", "sagemaker", "vertex", "azureml"):
        refresh_report, ok = _refresh_other(args, cache_path, out, err, pricing_client)
        if not ok:
            status = EXIT_REFRESH_FAILED
    if args.audit:
        return _audit(_catalog(args, cache_path), args, out) or status
    if args.managed or (args.refresh in MANAGED_SOURCES and args.instance):
        return _managed(args, cache_path, out, err,
                        refresh_failed=status == EXIT_REFRESH_FAILED) or status
    if args.refresh in MANAGED_SOURCES:
        return status  # managed prices are no instance table: --managed --instance shows them
    if args.refresh == "aws":
        from pricing.refresh import refresh_aws

        region = args.region or os.environ.get("AWS_REGION") or os.environ.get(
            "AWS_DEFAULT_REGION") or "us-east-1"
        types = args.instance or sorted(
            {o.instance_type for o in Catalog.load().filter(provider="aws")})
        progress = None if args.json else (lambda line: print(f"  {line}", file=out, flush=True))
        if not args.json:
            print(f"refreshing {plural(len(types), 'AWS instance type')} in {region} ...",
                  file=out)
        before = len(read_cache(cache_path))
        result = refresh_aws(types, region, session=session, cache_path=cache_path,
                             pricing_client=pricing_client, ec2_client=ec2_client,
                             progress=progress)
        for message in result.messages():
            print(f"mlcostd prices: {message}", file=err)
        if not result.ok:
            status = EXIT_REFRESH_FAILED
        _record(cache_path, "aws", result, err)
        refresh_report = {"provider": "aws", "region": region, "fetched": len(result.prices),
                          "errors": result.errors}
        if not args.json:
            print(refresh_summary(result, before) + "\n", file=out)

    catalog = _catalog(args, cache_path)
    lifecycle = "spot" if args.spot else "on-demand"
    # Each --instance that has no row gets its own reason, on stderr.
    explain_each = bool(args.instance) and args.refresh is None and args.fits is None
    try:
        if args.fits is not None:
            offers = catalog.cheapest_fitting(
                args.fits, gpu_count=args.gpus or 1, provider=args.provider, region=args.region,
                spot=args.spot, headroom=args.headroom, limit=args.limit)
            if args.accelerator:
                wanted = {id(o) for o in catalog.by_accelerator(args.accelerator)}
                offers = [o for o in offers if id(o) in wanted]
        else:
            offers = catalog.filter(provider=args.provider, accelerator=args.accelerator,
                                    region=args.region, instance_types=args.instance)
    except ValueError as exc:
        print(f"mlcostd prices: {exc}", file=err)
        return EXIT_USAGE
    if (args.region and not explain_each
            and not catalog.filter(provider=args.provider, region=args.region)):
        # A region with no prices at all is a mistyped or unpriced region, as an unknown
        # provider is: said on stderr, exit 2 (not an empty table that reads as an answer).
        print(f"mlcostd prices: {_unknown_region(args, catalog)}", file=err)
        return max(status, EXIT_USAGE)

    if args.json:
        payload: dict[str, Any] = {"lifecycle": lifecycle,
                                   "offers": [offer_to_dict(o) for o in offers]}
        if args.fits is not None:
            payload["fits"] = {"gpu_memory_gib": args.fits, "gpus": args.gpus or 1,
                               "headroom": args.headroom, "spot": args.spot}
        if refresh_report is not None:
            payload["refresh"] = refresh_report
        json.dump(payload, out, indent=2)
        out.write("\n")
    elif not offers:
        if not explain_each:
            print(_nothing_found(args, catalog), file=out)
    else:
        if args.fits is not None:
            need = args.fits * (1 + args.headroom)
            print(f"cheapest {lifecycle} instances with >= {plural(args.gpus or 1, 'accelerator')} of "
                  f">= {need:.1f} GiB each ({args.fits:g} GiB + {args.headroom:.0%} headroom):",
                  file=out)
        table, sources = format_table_with_sources(offers, lifecycle)
        print(table, file=out)
        print("\nsources:", file=out)  # every price in the table points at one of these
        for number, source in enumerate(sources, 1):
            print(f"  [{number}] {source}", file=out)
        for line in stale_warnings(offers, lifecycle):
            print(line, file=err)
    if explain_each:
        for itype in args.instance:
            if not any(normalize_instance_type(o.instance_type) == normalize_instance_type(itype)
                       for o in offers):
                print(f"mlcostd prices: {_instance_missing(catalog, args, itype)}", file=err)
                status = max(status, EXIT_USAGE)
    return status


def _instance_missing(catalog: Catalog, args: argparse.Namespace, itype: str) -> str:
    """Why --instance ITYPE shows no row: no provider lists it, not in --region, or not with
    --accelerator; each names what the catalog has."""
    listed = catalog.filter(provider=args.provider, instance_types=[itype])
    if listed and args.accelerator and not catalog.filter(
            provider=args.provider, region=args.region, accelerator=args.accelerator,
            instance_types=[itype]):
        return f"{itype} has {listed[0].accelerator}, not {args.accelerator} (--accelerator)"
    provider = args.provider or (listed[0].provider if listed else _guess_provider(itype))
    return catalog.explain_missing(provider, itype, args.region)


def _catalog(args: argparse.Namespace, cache_path: str | None) -> Catalog:
    """The catalog with the extra CSV catalogs the caller set (`args.extra_catalogs`, from the
    daemon's [pricing].extra_catalogs) and, with `cache_path`, the cached live prices; each
    price's source, note and URL through `args.shown_text` where the caller set one (the
    daemon's redaction: a source or URL may carry a token, `?api_key=...`)."""
    catalog = Catalog.load(cache_path=cache_path,
                           extra_catalogs=getattr(args, "extra_catalogs", None) or ())
    shown = getattr(args, "shown_text", None)
    return catalog.with_texts(shown) if shown is not None else catalog


def companion_error(args: argparse.Namespace) -> str:
    """Companion flags (COMPANIONS) given without their main flag, in one line: "--headroom
    goes with --fits GIB", "--pid and --since go with --observed"; "" when none. Reads the
    command line as given: call it before any default from a config fills a flag in."""
    missing: dict[str, list[str]] = {}
    for flag, dest, main in COMPANIONS:
        value = getattr(args, dest, None)
        if value is not None and value is not False and not MAIN_GIVEN[main](args):
            missing.setdefault(main, []).append(flag)
    return "; ".join(
        f"{flags[0]} goes with {main}" if len(flags) == 1 else
        f"{', '.join(flags[:-1])} and {flags[-1]} go with {main}"
        for main, flags in missing.items())


def _with_defaults(args: argparse.Namespace) -> argparse.Namespace:
    """The companions' defaults, once companion_error has seen what the command line gave."""
    if args.headroom is None:
        args.headroom = DEFAULT_HEADROOM
    if args.limit is None:
        args.limit = DEFAULT_LIMIT
    if args.hours_per_month is None:
        args.hours_per_month = HOURS_PER_MONTH
    return args


def _check_usage(args: argparse.Namespace) -> str:
    companions = companion_error(args)
    if companions:
        return companions
    _with_defaults(args)
    catalog = _catalog(args, None)
    if args.provider and args.provider.lower() not in catalog.providers():
        return (f"unknown provider {args.provider!r}; known: {', '.join(catalog.providers())}")
    if args.accelerator and not catalog.by_accelerator(args.accelerator):
        return (f"no instance with accelerator {args.accelerator!r}; known: "
                f"{', '.join(catalog.accelerators())} (or a GPU name as NVML and mlcost-top "
                "show it, e.g. 'NVIDIA A100-SXM4-40GB')")
    if args.fits is not None and args.fits <= 0:
        return f"--fits needs a positive memory size in GiB, not {args.fits:g}"
    if args.gpus is not None and args.gpus < 1:
        return f"--gpus needs at least 1, not {args.gpus}"
    if args.headroom < 0:
        return f"--headroom must be >= 0, not {args.headroom:g}"
    if (args.refresh in ("aws", "azure", "gcp") and args.provider
            and args.provider.lower() != args.refresh):
        return f"--refresh {args.refresh} conflicts with --provider {args.provider}"
    foreign = _foreign_instance(catalog, args)
    if foreign:
        return foreign
    if args.managed and not args.instance:
        return "--managed needs --instance TYPE (e.g. --instance p4d.24xlarge)"
    if args.catalog_url and "@" in urlsplit(args.catalog_url).netloc:  # (not echoed: a secret)
        return ("--catalog-url has a user or password in it, which would be kept and shown "
                "with each price as its source; serve the catalogs without them")
    if args.managed and args.hours_per_month <= 0:
        return f"--hours-per-month must be > 0, not {args.hours_per_month:g}"
    return ""


def _foreign_instance(catalog: Catalog, args: argparse.Namespace) -> str:
    """Why an --instance of --refresh SOURCE is another provider's type (`--refresh azure
    --instance p4d.24xlarge` asked Azure for 'Standard_p4d.24xlarge'), from the catalog; ""
    when each is the source's own or one the catalog does not list (a new type is asked)."""
    provider = REFRESH_PROVIDERS.get(args.refresh or "")
    if provider is None or not args.instance:
        return ""
    for itype in args.instance:
        bare = itype.removeprefix("ml.") if args.refresh == "sagemaker" else itype
        listed = {o.provider for o in catalog.filter(instance_types=[bare])}
        if listed and provider not in listed:
            owner = sorted(listed)[0]
            example = next((o.instance_type for o in catalog.filter(provider=provider)
                            if o.is_gpu), "")
            return (f"{itype} is {PROVIDER_TYPE_NAMES.get(owner, owner + ' instance type')}, "
                    f"not {PROVIDER_TYPE_NAMES[provider]}: --refresh {args.refresh} fetches "
                    f"{SERVICE_NAMES[args.refresh]} prices of "
                    f"{PROVIDER_TYPE_NAMES[provider].split(' ', 1)[1]}s"
                    + (f" (e.g. {example})" if example else "")
                    + (f"; for {itype} use --refresh {_source_of(owner, args.refresh)}"
                       if owner in ("aws", "azure", "gcp") else "; for it use --refresh catalog"))
    return ""


def _source_of(provider: str, like: str) -> str:
    """The --refresh source of `provider` of the same kind as `like` (a managed service's for
    a managed one: sagemaker for aws after --refresh vertex)."""
    if like in MANAGED_SOURCES:
        return next(k for k in MANAGED_SOURCES if REFRESH_PROVIDERS[k] == provider)
    return provider


def _refresh_other(args: argparse.Namespace, cache_path: str, out: TextIO, err: TextIO,
                   pricing_client: Any) -> tuple[dict[str, Any], bool]:
    """Run the azure / gcp / catalog / sagemaker refresh; ({report}, ok)."""
    source = args.refresh
    region: str = args.region or DEFAULT_REGIONS.get(source, "")
    # (a URL it names may hold a token: `[pricing].catalog_url = ".../sky?token=..."`)
    shown = getattr(args, "shown_text", None) or str
    progress = None if args.json else (lambda line: print(f"  {shown(line)}", file=out,
                                                          flush=True))
    bundled = Catalog.load()
    before = len(read_cache(cache_path))
    if source == "azure":
        from pricing import refresh_azure as azure

        sizes = args.instance or sorted({o.instance_type for o in bundled.filter(provider="azure")})
        if not args.json:
            print(f"refreshing {plural(len(sizes), 'Azure size')} in {region} ...", file=out)
        result = azure.refresh_azure(sizes, region, cache_path=cache_path,
                                     base_url=azure.AZURE_PRICES_URL, progress=progress)
    elif source == "catalog":
        from pricing.refresh_catalog import (
            CATALOG_CLOUDS,
            SKYPILOT_CATALOG_BASE_URL,
            refresh_catalog,
        )

        clouds = [args.provider.lower()] if args.provider else list(CATALOG_CLOUDS)
        base = args.catalog_url or SKYPILOT_CATALOG_BASE_URL
        if not args.json:
            print(f"refreshing {', '.join(clouds)} from {shown(base)} ...", file=out)
        result = refresh_catalog(clouds, cache_path=cache_path, base_url=base,
                                 regions=[args.region] if args.region else None,
                                 progress=progress)
    elif source in ("gcp", "vertex"):
        key_file = args.gcp_key_file or os.environ.get(GCP_KEY_FILE_ENV) or ""
        offers = bundled.filter(provider="gcp", instance_types=args.instance)
        offers = [o for o in offers if o.is_gpu]
        if not key_file:
            print(f"mlcostd prices: --refresh {source} needs an API key file: pass "
                  f"--gcp-key-file FILE or set ${GCP_KEY_FILE_ENV} ([pricing].gcp_api_key_file "
                  "in the config)" + ("; without a key use --refresh catalog"
                                      if source == "gcp" else ""), file=err)
            return {"source": source, "fetched": 0, "errors": {"(key)": ["no key file"]}}, False
        what = "GCP machine type" if source == "gcp" else "Vertex AI machine type"
        if not args.json:
            print(f"refreshing {plural(len(offers), what)} in {region} ...", file=out)
        if source == "gcp":
            from pricing.refresh_gcp import refresh_gcp as refresh_google
        else:
            from pricing.refresh_vertex import refresh_vertex as refresh_google
        result = refresh_google(offers, region, key_file=key_file, cache_path=cache_path,
                                progress=progress)
    elif source == "azureml":
        from pricing import refresh_azure as azure
        from pricing.refresh_azureml import refresh_azureml

        if not args.json:
            print(f"refreshing Azure ML surcharges in {region} ...", file=out)
        result = refresh_azureml(region, cache_path=cache_path, base_url=azure.AZURE_PRICES_URL,
                                 progress=progress)
    else:
        from pricing.managed import refresh_sagemaker

        types = args.instance or sorted({o.instance_type for o in bundled.filter(provider="aws")
                                         if o.is_gpu})
        if not args.json:
            print(f"refreshing SageMaker prices of {plural(len(types), 'type')} in {region} ...",
                  file=out)
        result = refresh_sagemaker(types, region, cache_path=cache_path,
                                   pricing_client=pricing_client)
    for message in result.messages():
        print(f"mlcostd prices: {shown(message)}", file=err)
    _record(cache_path, source, result, err)
    if not args.json:
        print(refresh_summary(result, before) + "\n", file=out)
    report = {"source": source, "region": region, "fetched": len(result.prices),
              "errors": {key: [shown(e) for e in errors]
                         for key, errors in result.errors.items()}}
    return report, result.ok


def plural(count: int, noun: str, plural_noun: str | None = None) -> str:
    """'1 price', '2 prices', '0 prices'."""
    return f"{count} {noun if count == 1 else (plural_noun or noun + 's')}"


def refresh_summary(result: Any, cached_before: int) -> str:
    """What a refresh did to the cache, in words that match what happened on disk:
    `cached_before` is how many prices the cache held before it."""
    fetched = len(result.prices)
    path = result.cache_path
    if fetched and "(cache)" in result.errors:
        return (f"{plural(fetched, 'live price')} fetched but not cached: {path} could not be "
                "written (see the error above)")
    if fetched:
        kept = "; the failed ones keep their previous prices" if not result.ok else ""
        return f"{plural(fetched, 'live price')} fetched and cached in {path}{kept}"
    if cached_before:
        stay = "stays as it was" if cached_before == 1 else "stay as they were"
        return (f"no live price fetched; the {plural(cached_before, 'price')} already cached "
                f"in {path} {stay}")
    return f"no live price fetched; nothing is cached yet (cache: {path})"


def _record(cache_path: str, source: str, result: Any, err: TextIO) -> None:
    """Note the refresh's outcome in the cache, so `mlcostd check` can tell why prices are old."""
    from pricing.cache import RefreshRecord, record_refresh

    try:
        record_refresh(cache_path, RefreshRecord(source, result.fetched_at, result.ok,
                                                 len(result.prices), tuple(result.messages())))
    except OSError as exc:
        print(f"mlcostd prices: could not write the price cache {cache_path}: {exc}; pass "
              "--cache FILE in a writable directory", file=err)


def _audit(catalog: Catalog, args: argparse.Namespace, out: TextIO) -> int:
    rejections = [r for r in catalog.rejections
                  if (not args.provider or r.provider == args.provider.lower())
                  and (not args.region or r.region.lower() == args.region.lower())]
    if args.json:
        json.dump({"rejections": [
            {"provider": r.provider, "region": r.region, "instance_type": r.instance_type,
             "kind": r.kind, "per_hour": r.per_hour, "rule": r.rule, "reason": r.reason}
            for r in rejections]}, out, indent=2)
        out.write("\n")
        return EXIT_OK
    if not rejections:
        print(f"the sanity rules left nothing out of {len(catalog)} offers", file=out)
        return EXIT_OK
    print(f"{plural(len(rejections), 'price or row', 'prices or rows')} left out by the sanity rules:", file=out)
    for rejection in rejections:
        print(f"  {rejection.describe()}", file=out)
    return EXIT_OK


def _managed(args: argparse.Namespace, cache_path: str, out: TextIO, err: TextIO,
             refresh_failed: bool = False) -> int:
    """Each --instance's hardware on every managed platform against self-managed; after
    `--refresh SERVICE` (no --managed), what is missing is said of that service alone."""
    from pricing.managed import PLATFORM_OF_PROVIDER, same_hardware

    catalog = _catalog(args, cache_path)
    shown = getattr(args, "shown_text", None) or str  # (a managed price's source: the cache's)
    refreshed = args.refresh if args.refresh in MANAGED_SOURCES and not args.managed else None
    status = EXIT_OK
    documents = []
    for itype in args.instance:
        provider = (args.provider or _guess_provider(itype.removeprefix("ml."))).lower()
        try:
            base, rows, missing = same_hardware(catalog, itype, cache_path, provider=provider,
                                                region=args.region,
                                                hours_per_month=args.hours_per_month,
                                                refreshed=refreshed,
                                                refresh_failed=refresh_failed)
        except PricingError as exc:
            print(f"mlcostd prices: {exc}", file=err)
            status = EXIT_REFRESH_FAILED
            continue
        own = PLATFORM_OF_PROVIDER.get(base.provider)
        if own is not None and not any(r.platform == own.name for r in rows):
            status = EXIT_REFRESH_FAILED  # the asked instance's own platform has no price
        hardware = f"{base.accelerator_count} x {base.accelerator}"
        documents.append({"instance_type": base.instance_type, "provider": base.provider,
                          "region": base.region, "hardware": hardware,
                          "managed": [_comparison_json(c, shown) for c in rows],
                          "missing": missing})
        if args.json:
            continue
        print(f"managed vs self-managed, the hardware of {base.provider}/{base.instance_type} "
              f"({hardware}) at {args.hours_per_month:g} h a month:", file=out)
        for c in rows:
            print(f"  {shown(c.describe())}", file=out)
            print(f"    managed: {shown(c.managed_source)}", file=out)
            print(f"    self-managed: {shown(c.self_managed_source)}", file=out)
        for line in missing:
            print(f"mlcostd prices: {line}", file=err)
    if args.json:
        # One instance: its rows at the top level (the common case); more: one entry each.
        payload: dict[str, Any] = (documents[0] if len(documents) == 1
                                   else {"instances": documents})
        json.dump(payload if documents else {"managed": [], "missing": []}, out, indent=2)
        out.write("\n")
    return status


def _comparison_json(c: Any, shown: Callable[[str], str] = str) -> dict[str, Any]:
    return {"platform": c.platform, "component": c.component, "instance_type": c.instance_type,
            "managed_instance_type": c.managed_instance_type, "region": c.region,
            "self_managed_region": c.self_managed_region,
            "managed_per_hour": c.managed_per_hour,
            "self_managed_per_hour": c.self_managed_per_hour,
            "hours_per_month": c.hours_per_month,
            "monthly_difference": round(c.monthly_difference, 2),
            "markup_pct": round(c.markup_pct, 2), "managed_source": shown(c.managed_source),
            "self_managed_source": shown(c.self_managed_source), "summary": shown(c.describe())}


def stale_warnings(offers: Sequence[InstanceOffer], lifecycle: str = "on-demand") -> list[str]:
    """One warning per stale price shown (few offers), else one summary line."""
    stale = []
    for offer in offers:
        price = offer.price(lifecycle) or offer.on_demand
        if price is None or price.live:
            continue
        verdict = price_staleness(price, offer.provider, offer.region, offer.instance_type)
        if verdict.stale:
            stale.append((offer, verdict))
    if not stale:
        return []
    if len(stale) <= MAX_STALE_LINES:
        return [f"warning: {verdict.message}" for _, verdict in stale]
    providers = sorted({o.provider for o, _ in stale})
    return [f"warning: {len(stale)} of {len(offers)} prices shown are stale (date unknown, "
            f"older than {STALE_AFTER_DAYS} days, or from before a price cut); run "
            f"`mlcostd prices --refresh catalog` (no key) or `--refresh aws|azure|gcp` for "
            f"{', '.join(providers)}"]


def _guess_provider(instance_type: str) -> str:
    lowered = instance_type.lower()
    if lowered.startswith(("standard_", "nc", "nd", "nv")):
        return "azure"
    if lowered.startswith("gpu_"):
        return "lambda"
    if "." in lowered:
        return "aws"
    return "gcp"


def _nothing_found(args: argparse.Namespace, catalog: Catalog) -> str:
    if args.fits is not None:
        biggest = max((o.accelerator_memory_gib for o in catalog), default=0)
        return (f"no instance fits {args.fits:g} GiB x {plural(args.gpus or 1, 'accelerator')} with "
                f"{args.headroom:.0%} headroom and the given filters (largest accelerator "
                f"memory in the catalog: {biggest:g} GiB)")
    return "no instance matches the given filters"


def _unknown_region(args: argparse.Namespace, catalog: Catalog) -> str:
    regions = sorted({o.region for o in catalog.filter(provider=args.provider)})
    return (f"no prices in region {args.region!r}"
            f"{' for ' + args.provider if args.provider else ''}; regions with prices: "
            f"{', '.join(regions)} (`mlcostd prices --refresh aws|azure|gcp --region "
            "REGION` fetches live ones)")


def _per_hour(value: float | None) -> str:
    """A price in the table's $/h column: four decimals, no sign (its header says $/h)."""
    return "-" if value is None else f"{value:.4f}"


def _spot_text(price: Price | None) -> str:
    if price is None:
        return "-"
    if price.low is not None and price.high is not None and price.low != price.high:
        return f"{price.low:.3f}-{price.high:.3f}"
    return f"{price.per_hour:.4f}"


def _shown_prices(offer: InstanceOffer) -> list[tuple[str, Price]]:
    """The prices a table row shows, by the column's lifecycle."""
    return [(kind, price) for kind, price in (("on-demand", offer.on_demand), ("spot", offer.spot),
                                              ("1y", offer.commit_1y), ("3y", offer.commit_3y))
            if price is not None]


def _source_key(price: Price) -> str:
    return price.source + (f" ({price.url})" if price.url else "")


def _prices_text(offer: InstanceOffer, footnote: dict[str, int]) -> str:
    """The age and source note of every price in the row: one text when they share it
    ('bundled, catalog date unknown [1]'), else per lifecycle ('on-demand: live, 3 s old [2];
    spot: bundled, catalog date unknown [1]')."""
    shown = _shown_prices(offer)
    if not shown:
        return "no price"
    notes = [(kind, f"{price.describe()} [{footnote[_source_key(price)]}]")
             for kind, price in shown]
    if len({note for _, note in notes}) == 1:
        return notes[0][1]
    return "; ".join(f"{kind}: {note}" for kind, note in notes)


def format_table(offers: Sequence[InstanceOffer], lifecycle: str = "on-demand") -> str:
    """A plain-text table; $/ACC-h is the host price divided by its accelerator count."""
    return format_table_with_sources(offers, lifecycle)[0]


def format_table_with_sources(offers: Sequence[InstanceOffer],
                              lifecycle: str = "on-demand") -> tuple[str, list[str]]:
    """(the table, its sources in footnote order): the PRICES column gives each price's age
    and the number of its source, so every price printed says where it is from and how old."""
    footnote: dict[str, int] = {}
    for offer in offers:
        for _, price in _shown_prices(offer):
            footnote.setdefault(_source_key(price), len(footnote) + 1)
    headers = ["PROVIDER", "REGION", "INSTANCE", "ACCEL", "N", "GiB/ACC", "vCPU", "RAM GiB",
               "ON-DEMAND $/h", "SPOT $/h", "1Y $/h", "3Y $/h", f"{lifecycle.upper()} $/ACC-h",
               "PRICES"]
    rows = [headers]
    for o in offers:
        rows.append([
            o.provider, o.region, o.instance_type, o.accelerator, str(o.accelerator_count),
            f"{o.accelerator_memory_gib:g}", "-" if o.vcpus is None else str(o.vcpus),
            "-" if o.memory_gib is None else f"{o.memory_gib:g}",
            _per_hour(o.on_demand.per_hour if o.on_demand else None), _spot_text(o.spot),
            _per_hour(o.commit_1y.per_hour if o.commit_1y else None),
            _per_hour(o.commit_3y.per_hour if o.commit_3y else None),
            _per_hour(o.price_per_accelerator(lifecycle)), _prices_text(o, footnote),
        ])
    widths = [max(len(row[i]) for row in rows) for i in range(len(headers))]
    numeric = {4, 5, 6, 7, 8, 9, 10, 11, 12}
    lines = []
    for row in rows:
        cells = [cell.rjust(widths[i]) if i in numeric else cell.ljust(widths[i])
                 for i, cell in enumerate(row)]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines), list(footnote)


def _price_to_dict(price: Price | None, offer: InstanceOffer) -> dict[str, Any] | None:
    """A price as `--json` gives it: `stale` the warning where it may be wrong (a live price
    is as fetched: None), else None; `status` the row's (`current`, `pre-cut`, `estimate`),
    or `stale` for a current row older than the threshold or undated: a price the output
    warns about never reads as current."""
    if price is None:
        return None
    age_s = price.age_s
    staleness = None if price.live else price_staleness(
        price, offer.provider, offer.region, offer.instance_type)
    stale = staleness.message or None if staleness is not None else None
    return {
        "per_hour": price.per_hour, "low": price.low, "high": price.high,
        "source": price.source, "as_of": price.as_of.isoformat() if price.as_of else None,
        "live": price.live, "age_s": None if age_s is None else round(age_s, 1),
        "age_days": None if age_s is None else age_days(age_s),  # as the table and warning say
        "describe": price.describe(),
        "status": "stale" if stale and price.status == "current" else price.status,
        "note": price.note, "url": price.url or None, "stale": stale,
    }


def offer_to_dict(offer: InstanceOffer) -> dict[str, Any]:
    on_demand = _price_to_dict(offer.on_demand, offer)
    return {
        "provider": offer.provider, "region": offer.region,
        "instance_type": offer.instance_type, "accelerator": offer.accelerator,
        "accelerator_count": offer.accelerator_count,
        "accelerator_memory_gib": offer.accelerator_memory_gib,
        "vcpus": offer.vcpus, "memory_gib": offer.memory_gib,
        "on_demand": on_demand, "spot": _price_to_dict(offer.spot, offer),
        "commit_1y": _price_to_dict(offer.commit_1y, offer),
        "commit_3y": _price_to_dict(offer.commit_3y, offer),
        "price_unit": offer.price_unit,
        "on_demand_per_accelerator": offer.price_per_accelerator("on-demand"),
        "stale": on_demand["stale"] if on_demand else None,  # the on-demand price's, as before
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Stand-alone entry (`python -m pricing.cli`) until the daemon's CLI wires it in."""
    parser = argparse.ArgumentParser(prog="mlcostd prices", description=__doc__,
                                     allow_abbrev=False)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
