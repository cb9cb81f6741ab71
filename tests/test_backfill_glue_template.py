"""deploy/backfill-glue.yaml resolved (cfn-lint runs over every template in
tests/test_deploy_template.py): the Glue job runs the package-backfill artifact on Glue 5.1
the way Glue documents job parameters ("Using job parameters in AWS Glue jobs":
--extra-py-files, --additional-python-modules), and the COPY role may only read the staging
prefix."""

from __future__ import annotations

from tests.test_deploy_template import DEPLOY, Stack

PARAMS = {
    "ArtifactBucket": "artifacts",
    "SnapshotBucket": "lake",
    "StagingBucket": "staging",
    "AdditionalPythonModules": "pydantic==2.14.3,pydantic_core==2.50.4",
}


def stack() -> Stack:
    return Stack(DEPLOY / "backfill-glue.yaml", **PARAMS)


def test_the_glue_job_runs_the_artifact_on_glue_5_1():
    job = stack().properties("BackfillJob")
    assert job["GlueVersion"] == "5.1"  # Spark 3.5.6, Python 3.11 (AWS Glue versions)
    assert job["Command"] == {
        "Name": "glueetl",
        "PythonVersion": "3",
        "ScriptLocation": "s3://artifacts/redshift-sync/backfill/job.py",
    }
    args = job["DefaultArguments"]
    assert args["--extra-py-files"] == "s3://artifacts/redshift-sync/backfill/redshift_sync.zip"
    assert args["--additional-python-modules"] == PARAMS["AdditionalPythonModules"]
    assert args["--config"] == "s3://artifacts/redshift-sync/backfill/pipeline.toml"


def test_the_copy_role_only_reads_the_staging_prefix():
    s = stack()
    assert s.grants("CopyRole") == {
        "s3:GetObject": ["arn:aws:s3:::staging/redshift-sync/staging/*"],
        "s3:ListBucket": ["arn:aws:s3:::staging"],
    }
    trust = s.properties("CopyRole")["AssumeRolePolicyDocument"]["Statement"][0]["Principal"]["Service"]
    assert set(trust) == {"redshift.amazonaws.com", "redshift-serverless.amazonaws.com"}


def test_the_job_role_reads_snapshots_and_writes_only_run_folders():
    grants = stack().grants("GlueJobRole")
    assert grants["s3:PutObject"] == grants["s3:DeleteObject"] == ["arn:aws:s3:::staging/redshift-sync/staging/*"]
    assert set(grants["s3:GetObject"]) == {
        "arn:aws:s3:::artifacts/redshift-sync/backfill/*",
        "arn:aws:s3:::lake/snapshots/*",
        "arn:aws:s3:::staging/redshift-sync/staging/*",
    }
