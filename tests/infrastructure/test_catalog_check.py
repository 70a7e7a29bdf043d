"""The synth checks the application's catalog: a subscription that would never run fails ``cdk synth``.

Each case writes a small app package into a code asset of its own (as a user's ``src/`` would be), and builds
an ``OutboxPipeline`` on it. What fails must say what to fix; what the app accepts is recorded in the template.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from aws_cdk import App, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk.assertions import Template

from outbox_cdk import AcceptedCatalogProblem, Alarms, CatalogContractError, OutboxPipeline

CATALOG_SOURCE = """
import os

from pydantic import BaseModel

from outbox import Lane, Subscription
from outbox.catalog import Catalog, EventTypeSpec, Module


class Placed(BaseModel):
    order_id: str


def record_sale(delivery):
    return None


def build():
    assert os.environ["ORDERS_TABLE"]  # read at cold start; at synth a placeholder stands for the token
    return Catalog(
        [
            Module(
                name="shop",
                code=(),
                event_types=(EventTypeSpec("shop.order_placed", Placed, emitted_by="the checkout API"),),
                subscriptions=(Subscription("shop.record_sale", PATTERN, LANE, record_sale),),
            )
        ]
    )
"""
# Each app gets a package name of its own: Python caches an imported module for the process.
PACKAGES = (f"shop{n}" for n in itertools.count())


def app_code(tmp_path: Path, pattern: str = "shop.order_placed", lane: str = "DURABLE") -> tuple[lambda_.Code, str]:
    package = next(PACKAGES)
    source = tmp_path / "src" / package
    source.mkdir(parents=True)
    (source / "__init__.py").write_text("")
    body = CATALOG_SOURCE.replace("PATTERN", repr(pattern)).replace("LANE", f"Lane.{lane}")
    (source / "catalog.py").write_text(body)
    return lambda_.Code.from_asset(str(tmp_path / "src")), package


def pipeline(code: lambda_.Code, catalog: str, **options: object) -> Stack:
    stack = Stack(App(context={"aws:cdk:bundling-stacks": []}), "Shop")
    orders = iam.Role(stack, "Stand", assumed_by=iam.AccountRootPrincipal())  # any token will do as a name
    OutboxPipeline(
        stack,
        "Outbox",
        code=code,
        catalog=catalog,
        environment={"ORDERS_TABLE": orders.role_name},
        alarms=Alarms.nobody("a test stack"),
        operators=[iam.AccountRootPrincipal()],
        **options,  # type: ignore[arg-type]
    )
    return stack


def test_a_clean_catalog_synthesizes(tmp_path: Path) -> None:
    code, package = app_code(tmp_path)
    Template.from_stack(pipeline(code, f"{package}.catalog:build"))


def test_a_mistyped_glob_fails_the_synth_with_the_likely_intent_and_where_it_is_declared(tmp_path: Path) -> None:
    code, package = app_code(tmp_path, pattern="shop.order_plcaed")
    with pytest.raises(CatalogContractError) as raised:
        pipeline(code, f"{package}.catalog:build")
    message = str(raised.value)
    assert "'shop.record_sale'" in message
    assert "matches no event type" in message
    assert "shop.order_placed" in message, "it names what was probably meant"
    assert f"{package}/catalog.py:" in message, "it names the file that declares the handler"


def test_a_domain_handler_on_best_effort_fails_the_synth(tmp_path: Path) -> None:
    code, package = app_code(tmp_path, lane="BEST_EFFORT")
    with pytest.raises(CatalogContractError, match="BEST_EFFORT only carries row changes: it would never run"):
        pipeline(code, f"{package}.catalog:build")


def test_a_missing_catalog_module_fails_the_synth_naming_it(tmp_path: Path) -> None:
    code, package = app_code(tmp_path)
    with pytest.raises(CatalogContractError, match=rf"no module '{package}\.catalgo' in the code asset"):
        pipeline(code, f"{package}.catalgo:build")
    with pytest.raises(CatalogContractError, match="has no function 'biuld'"):
        pipeline(code, f"{package}.catalog:biuld")


def test_an_accepted_problem_synthesizes_and_is_recorded_in_the_template(tmp_path: Path) -> None:
    code, package = app_code(tmp_path, pattern="shop.refund_*")
    accepted = AcceptedCatalogProblem("'shop.record_sale'", "refunds ship next release; the handler waits for them")

    stack = pipeline(code, f"{package}.catalog:build", accept_catalog_problems=[accepted])

    metadata = Template.from_stack(stack).to_json()["Metadata"]
    assert metadata["outbox:acceptedCatalogProblems"] == [{"problem": accepted.problem, "reason": accepted.reason}]


def test_an_acceptance_that_matches_no_problem_fails_the_synth(tmp_path: Path) -> None:
    code, package = app_code(tmp_path)
    stale = AcceptedCatalogProblem("'shop.record_sale'", "it was mistyped once")
    with pytest.raises(CatalogContractError, match="accepted, but no problem of the catalog reads"):
        pipeline(code, f"{package}.catalog:build", accept_catalog_problems=[stale])
