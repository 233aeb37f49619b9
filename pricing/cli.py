"""`mlcostd prices`: the catalog as a table or JSON, what fits a workload, live AWS refresh.

The daemon's CLI wires this in with `add_arguments(subparser)` and `run(args)`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import Any, TextIO

from pricing.cache import default_cache_path
from pricing.catalog import Catalog, InstanceOffer, Price

EXIT_OK = 0
EXIT_REFRESH_FAILED = 1  # the table is still printed; some or all live prices are missing
EXIT_USAGE = 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the `prices` options to `parser`."""
    parser.add_argument("--provider", help="only this cloud: aws, gcp, azure, lambda")
    parser.add_argument("--accelerator", help="only this accelerator, e.g. H100, A100, L40S")
    parser.add_argument("--region", help="only this region (with --refresh: the region to fetch)")
    parser.add_argument("--instance", nargs="+", action="extend", metavar="TYPE",
                        help="only these instance types (with --refresh: the types to fetch)")
    parser.add_argument("--fits", type=float, metavar="GIB",
                        help="cheapest instances whose accelerators each hold GIB of memory "
                             "(plus --headroom)")
    parser.add_argument("--gpus", type=int, default=None, metavar="N",
                        help="with --fits: at least N accelerators (default 1)")
    parser.add_argument("--spot", action="store_true",
                        help="with --fits: rank by spot price instead of on-demand")
    parser.add_argument("--headroom", type=float, default=0.1,
                        help="with --fits: extra memory fraction to leave free (default 0.1)")
    parser.add_argument("--limit", type=int, default=10, help="with --fits: rows (default 10)")
    parser.add_argument("--refresh", choices=["aws"],
                        help="fetch live prices first (AWS Price List + spot price history)")
    parser.add_argument("--cache", default=None, metavar="FILE",
                        help=f"live price cache (default {default_cache_path()})")
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
    if args.refresh == "aws":
        from pricing.refresh import refresh_aws

        region = args.region or os.environ.get("AWS_REGION") or os.environ.get(
            "AWS_DEFAULT_REGION") or "us-east-1"
        types = args.instance or sorted(
            {o.instance_type for o in Catalog.load().filter(provider="aws")})
        progress = None if args.json else (lambda line: print(f"  {line}", file=out, flush=True))
        if not args.json:
            print(f"refreshing {len(types)} AWS instance type(s) in {region} ...", file=out)
        result = refresh_aws(types, region, session=session, cache_path=cache_path,
                             pricing_client=pricing_client, ec2_client=ec2_client,
                             progress=progress)
        for message in result.messages():
            print(f"mlcostd prices: {message}", file=err)
        if not result.ok:
            status = EXIT_REFRESH_FAILED
        refresh_report = {"provider": "aws", "region": region, "fetched": len(result.prices),
                          "errors": result.errors}
        if not args.json:
            print(f"{len(result.prices)} live price(s) fetched, cached in {cache_path}\n",
                  file=out)

    catalog = Catalog.load(cache_path=cache_path)
    lifecycle = "spot" if args.spot else "on-demand"
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
        print(_nothing_found(args, catalog), file=out)
    else:
        if args.fits is not None:
            need = args.fits * (1 + args.headroom)
            print(f"cheapest {lifecycle} instances with >= {args.gpus or 1} accelerator(s) of "
                  f">= {need:.1f} GiB each ({args.fits:g} GiB + {args.headroom:.0%} headroom):",
                  file=out)
        print(format_table(offers, lifecycle), file=out)
    if args.instance and args.refresh is None and args.fits is None:
        for itype in args.instance:
            if not catalog.filter(provider=args.provider, instance_types=[itype]):
                print(f"mlcostd prices: {catalog.explain_missing(args.provider or _guess_provider(itype), itype)}",
                      file=err)
                status = max(status, EXIT_USAGE)
    return status


def _check_usage(args: argparse.Namespace) -> str:
    catalog = Catalog.load()
    if args.provider and args.provider.lower() not in catalog.providers():
        return (f"unknown provider {args.provider!r}; known: {', '.join(catalog.providers())}")
    if args.accelerator and not catalog.by_accelerator(args.accelerator):
        return (f"no instance with accelerator {args.accelerator!r}; known: "
                f"{', '.join(catalog.accelerators())}")
    if args.fits is None and (args.gpus is not None or args.spot):
        return "--gpus and --spot go with --fits GIB"
    if args.fits is not None and args.fits <= 0:
        return f"--fits needs a positive memory size in GiB, not {args.fits:g}"
    if args.gpus is not None and args.gpus < 1:
        return f"--gpus needs at least 1, not {args.gpus}"
    if args.headroom < 0:
        return f"--headroom must be >= 0, not {args.headroom:g}"
    if args.refresh and args.provider and args.provider.lower() != args.refresh:
        return f"--refresh {args.refresh} conflicts with --provider {args.provider}"
    return ""


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
        return (f"no instance fits {args.fits:g} GiB x {args.gpus or 1} accelerator(s) with "
                f"{args.headroom:.0%} headroom and the given filters (largest accelerator "
                f"memory in the catalog: {biggest:g} GiB)")
    return "no instance matches the given filters"


def _money(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def _spot_text(price: Price | None) -> str:
    if price is None:
        return "-"
    if price.low is not None and price.high is not None and price.low != price.high:
        return f"{price.low:.3f}-{price.high:.3f}"
    return f"{price.per_hour:.4f}"


def _source_text(offer: InstanceOffer, lifecycle: str) -> str:
    chosen = offer.price(lifecycle) or offer.on_demand or offer.spot
    return chosen.describe() if chosen else "no price"


def format_table(offers: Sequence[InstanceOffer], lifecycle: str = "on-demand") -> str:
    """A plain-text table; $/ACC-h is the host price divided by its accelerator count."""
    headers = ["PROVIDER", "REGION", "INSTANCE", "ACCEL", "N", "GiB/ACC", "vCPU", "RAM GiB",
               "ON-DEMAND $/h", "SPOT $/h", "1Y $/h", f"{lifecycle.upper()} $/ACC-h", "PRICES"]
    rows = [headers]
    for o in offers:
        rows.append([
            o.provider, o.region, o.instance_type, o.accelerator, str(o.accelerator_count),
            f"{o.accelerator_memory_gib:g}", "-" if o.vcpus is None else str(o.vcpus),
            "-" if o.memory_gib is None else f"{o.memory_gib:g}",
            _money(o.on_demand.per_hour if o.on_demand else None), _spot_text(o.spot),
            _money(o.commit_1y.per_hour if o.commit_1y else None),
            _money(o.price_per_accelerator(lifecycle)), _source_text(o, lifecycle),
        ])
    widths = [max(len(row[i]) for row in rows) for i in range(len(headers))]
    numeric = {4, 5, 6, 7, 8, 9, 10, 11}
    lines = []
    for row in rows:
        cells = [cell.rjust(widths[i]) if i in numeric else cell.ljust(widths[i])
                 for i, cell in enumerate(row)]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def _price_to_dict(price: Price | None) -> dict[str, Any] | None:
    if price is None:
        return None
    return {
        "per_hour": price.per_hour, "low": price.low, "high": price.high,
        "source": price.source, "as_of": price.as_of.isoformat() if price.as_of else None,
        "live": price.live, "age_s": None if price.age_s is None else round(price.age_s, 1),
        "describe": price.describe(),
    }


def offer_to_dict(offer: InstanceOffer) -> dict[str, Any]:
    return {
        "provider": offer.provider, "region": offer.region,
        "instance_type": offer.instance_type, "accelerator": offer.accelerator,
        "accelerator_count": offer.accelerator_count,
        "accelerator_memory_gib": offer.accelerator_memory_gib,
        "vcpus": offer.vcpus, "memory_gib": offer.memory_gib,
        "on_demand": _price_to_dict(offer.on_demand), "spot": _price_to_dict(offer.spot),
        "commit_1y": _price_to_dict(offer.commit_1y),
        "on_demand_per_accelerator": offer.price_per_accelerator("on-demand"),
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Stand-alone entry (`python -m pricing.cli`) until the daemon's CLI wires it in."""
    parser = argparse.ArgumentParser(prog="mlcostd prices", description=__doc__)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
