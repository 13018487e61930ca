"""The run wire format has one definition: what the codec writes is what its schema says,
the schema is what the OpenAPI document publishes, the workers' payload files are the same
JSON, and bad input is refused with one line naming the field."""

from __future__ import annotations

import copy
from datetime import UTC, datetime

import jsonschema
import pytest

from stackbench.errors import InputError
from stackbench.jobs.executors.buildbot import results
from stackbench.resultsdb import wire
from stackbench.resultsdb.rundata import JobSpec, KernelSpec, MachineSpec, RunData
from stackbench.web import openapi


def a_run() -> RunData:
    return RunData(
        job=JobSpec("vm-scalability", "anon-w-seq", {"size": "64M"}),
        kernel=KernelSpec("a" * 40, name="base", config_name="tiny-guest", tree="linux-6.1"),
        machine=MachineSpec("qemu-tcg", kind="qemu", cpus=2, memory_mb=1024),
        iteration=3,
        samples={"vm-scalability.throughput": [1.5, 2.5], "duration.elapsed": [4.0]},
        logs={"console": b"\x00boot\xff"},
        meta={"boot_id": "b1"},
        source="buildbot",
        started_at=datetime(2026, 11, 24, 1, 2, 3, tzinfo=UTC),
    )


def test_what_the_codec_writes_is_what_the_schema_says_and_reads_back():
    doc = wire.run_to_json(a_run())
    jsonschema.Draft202012Validator(wire.RUN_SCHEMA).validate(doc)
    back = wire.parse_run(doc)
    assert wire.run_to_json(back) == doc
    assert back.logs == {"console": b"\x00boot\xff"} and back.started_at == a_run().started_at


def test_the_openapi_document_publishes_the_wire_schema():
    assert openapi.document()["components"]["schemas"]["RunUpload"] is wire.RUN_SCHEMA


def test_a_worker_payload_is_the_wire_format_with_its_version():
    payload = results.to_payload(a_run())
    assert payload.pop("version") == results.PAYLOAD_VERSION
    assert payload == wire.run_to_json(a_run())
    again = results.from_payload(results.to_payload(a_run()), "run-000.json")
    assert again.key() == a_run().key() and again.samples == a_run().samples
    with pytest.raises(InputError, match=r"run-000.json: bad run payload: unsupported payload"):
        results.from_payload({**results.to_payload(a_run()), "version": 99}, "run-000.json")


@pytest.mark.parametrize(
    "change, where, what",
    [
        (lambda d: d["job"].pop("suite"), "run.job.suite", "is required"),
        (lambda d: d.pop("iteration"), "run.iteration", "is required"),
        (lambda d: d.__setitem__("iteration", -1), "run.iteration", "must be at least 0"),
        (lambda d: d.__setitem__("iteration", True), "run.iteration", "must be an integer"),
        (lambda d: d["machine"].__setitem__("cpus", "two"), "run.machine.cpus", "must be an integer"),
        (lambda d: d["kernel"].__setitem__("config_hash", "x" * 65), "run.kernel.config_hash",
         "longer than 64 characters"),
        (lambda d: d.__setitem__("status", "exploded"), "run.status", "unknown value 'exploded'"),
        (lambda d: d["samples"].__setitem__("m", ["1"]), "run.samples.m",
         "must be a number or a list of numbers"),
        (lambda d: d["samples"].__setitem__("m", [float("nan")]), "run.samples.m[0]",
         "not a finite number: nan"),
        (lambda d: d["samples"].__setitem__("m", [1, 10**400]), "run.samples.m",
         "a number of about 401 digits is out of range (at most 1.8e+308)"),
        (lambda d: d.__setitem__("duration_s", 10**400), "run.duration_s",
         "a number of about 401 digits is out of range (at most 1.8e+308)"),
        (lambda d: d.__setitem__("duration_s", float("inf")), "run.duration_s",
         "not a finite number: inf"),
        (lambda d: d["kernel"].__setitem__("tree", "t" * 300), "run.kernel.tree",
         "not a tree name: at most 100 ASCII letters, digits, . _ -"),
        (lambda d: d["logs"].__setitem__("console", "%%%"), "run.logs.console",
         "is not valid base64"),
        (lambda d: d.__setitem__("idempotency_key", "k" * 129), "run.idempotency_key",
         "longer than 128 characters"),
        (lambda d: d.__setitem__("started_at", "yesterday"), "run.started_at",
         "not an ISO 8601 time: 'yesterday'"),
    ],
)  # fmt: skip
def test_bad_input_is_refused_with_one_line_naming_the_field(change, where, what):
    doc = copy.deepcopy(wire.run_to_json(a_run()))
    change(doc)
    with pytest.raises(InputError) as err:
        wire.parse_run(doc)
    assert (err.value.path, err.value.what) == (where, what)
    assert "\n" not in str(err.value)
