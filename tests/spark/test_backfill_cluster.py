"""The packaged job on a Spark standalone cluster (a master and two one-core workers on the
loopback, started with PySpark's own launcher), executors on a Python with nothing but
PySpark, one worker killed mid-job: the run folder must match `local[2]`'s row for row.

Local mode runs every task in one JVM with Python workers of the driver's interpreter, so
it cannot show what executors lack; a standalone cluster can. Spark, "Spark Standalone
Mode": a master is started with `spark-class org.apache.spark.deploy.master.Master` and
workers with `...deploy.worker.Worker <master-spark-URL>`, `--cores` and `--memory`
bounding what each offers; when an executor is lost, its tasks and the shuffle output
it held are computed again elsewhere (the job does not fail).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.helpers import EXAMPLES
from tests.spark_envs import clean_env, spark_venv
from tests.spark_submit import build_artifact, driver_python, submit_command, submit_env

pytestmark = [pytest.mark.slow, pytest.mark.spark]

PIPELINE = EXAMPLES / "salesdb" / "pipeline.toml"
FILES, ROWS_PER_FILE = 24, 50
BOUNDED = {"SPARK_DAEMON_MEMORY": "256m", "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_NO_DAEMONIZE": "1"}
JOB_CONF = {
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.driver.memory": "512m",
    "spark.executor.memory": "512m",
    "spark.executor.cores": "1",
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "4",
    "spark.sql.files.maxPartitionBytes": "4096",  # one read task per snapshot file
}


# The driver logs each finished task (TaskSetManager at INFO), the rest at WARN.
DRIVER_LOG4J = """rootLogger.level = warn
rootLogger.appenderRef.console.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss.SSS} %p %c{1}: %m%n
logger.tasks.name = org.apache.spark.scheduler.TaskSetManager
logger.tasks.level = info
"""


def wait_for(log: Path, pattern: str, process: subprocess.Popen, seconds: float = 120) -> re.Match:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = re.search(pattern, log.read_text(errors="replace")) if log.exists() else None
        if found:
            return found
        assert process.poll() is None, f"{process.args[1]} exited: {log.read_text(errors='replace')[-3000:]}"
        time.sleep(0.2)
    raise TimeoutError(f"no {pattern!r} in {log} after {seconds} s")


@contextmanager
def daemon(command: list[str], log: Path, env: dict[str, str]) -> Iterator[subprocess.Popen]:
    """A process in a session of its own (its children too), killed with them at the end."""
    with log.open("w") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        yield process
    finally:
        stop(process)


def stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=30)


@contextmanager
def standalone_cluster(python: Path, folder: Path) -> Iterator[tuple[str, list[subprocess.Popen]]]:
    home = Path(subprocess.check_output([str(python), "-c", "import pyspark; print(pyspark.__path__[0])"], text=True).strip())
    spark_class = str(home / "bin" / "spark-class")
    env = clean_env(SPARK_HOME=str(home), SPARK_LOG_DIR=str(folder / "logs"), **BOUNDED)
    with ExitStack() as stack:
        master_log = folder / "master.log"
        master = stack.enter_context(
            daemon(
                [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", "0", "--webui-port", "0"],
                master_log,
                env,
            )
        )
        url = wait_for(master_log, r"Starting Spark master at (spark://127\.0\.0\.1:\d+)", master).group(1)
        workers = []
        for i in range(2):
            log = folder / f"worker-{i}.log"
            command = [spark_class, "org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1"]
            command += ["--cores", "1", "--memory", "640m", "--webui-port", "0", "--work-dir", str(folder / f"work-{i}")]
            workers.append(stack.enter_context(daemon(command, log, env)))
            wait_for(log, r"Successfully registered with master", workers[-1])
        yield url, workers


def snapshot(folder: Path) -> Path:
    folder.mkdir()
    for f in range(FILES):
        rows = [{"CUST_ID": f"K{f:02d}-{r:03d}", "NAME": f"name {f}/{r}", "MKTSEGMENT": "BUILDING"} for r in range(ROWS_PER_FILE)]
        (folder / f"part-{f:02d}.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    return folder


def rows(run: Path) -> list[dict]:
    """The staged rows of a run folder, from the files its manifest lists, in key order."""
    entries = json.loads((run / "manifest.json").read_text())["entries"]
    tables = [pq.read_table(run / "data" / e["url"].rsplit("/", 1)[-1]).to_pylist() for e in entries]
    return sorted((r for t in tables for r in t), key=lambda r: r["customer_id"])


def comparable(run: Path) -> dict:
    summary = json.loads((run / "summary.json").read_text())
    return {k: summary[k] for k in ("table", "fingerprint", "columns", "staged", "rejected", "notes")}


def test_cluster_with_a_worker_killed_matches_local_mode(tmp_path):
    python = spark_venv("3.5.6", with_project=False)  # executors: PySpark and nothing else
    dist = tmp_path / "dist"
    build_artifact(dist, PIPELINE)
    driver = driver_python(python, dist, tmp_path)
    snap = snapshot(tmp_path / "snapshot")
    job_args = ["--table", "customer", "--snapshot", str(snap), "--format", "json", "--snapshot-time", "2024-05-01T00:00:00Z"]
    env = submit_env(python, driver)

    local = tmp_path / "run-local"
    done = subprocess.run(
        submit_command(python, driver, dist, "local[2]", [*job_args, "--output", str(local)], JOB_CONF),
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-4000:]

    cluster = tmp_path / "run-cluster"
    with standalone_cluster(python, tmp_path) as (url, workers):
        log4j = tmp_path / "driver-log4j2.properties"
        log4j.write_text(DRIVER_LOG4J)
        conf = {**JOB_CONF, "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile={log4j.as_uri()}"}
        command = submit_command(python, driver, dist, url, [*job_args, "--output", str(cluster)], conf)
        with daemon(command, tmp_path / "driver.log", env) as job:
            # Kill a worker (and its executor) once the first read tasks are done, mid-stage.
            wait_for(tmp_path / "driver.log", rf"Finished task .*\((?:[3-9]|1\d)/{FILES}\)", job, seconds=300)
            stop(workers[0])
            assert not (cluster / "summary.json").exists(), "the job ended before the worker was killed"
            assert job.wait(timeout=600) == 0, (tmp_path / "driver.log").read_text(errors="replace")[-4000:]
        driver_log = (tmp_path / "driver.log").read_text(errors="replace")
    assert re.search(r"Lost executor|Executor lost|removed executor", driver_log, re.IGNORECASE), driver_log[-3000:]
    assert comparable(cluster) == comparable(local)
    assert comparable(cluster)["staged"] == FILES * ROWS_PER_FILE
    assert rows(cluster) == rows(local)
