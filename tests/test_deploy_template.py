"""The CloudFormation templates under deploy/: cfn-lint clean, and what they grant and
configure once resolved for each way of authenticating (a small evaluator of the intrinsic
functions they use stands in for CloudFormation)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from cfnlint.decode import cfn_yaml

from sync import lambda_handler
from tests.conftest import REPO

DEPLOY = REPO / "deploy"
PSEUDO = {"AWS::Partition": "aws", "AWS::Region": "us-east-1", "AWS::AccountId": "123456789012"}
NO_VALUE = object()
WORKGROUP = "arn:aws:redshift-serverless:us-east-1:123456789012:workgroup/0f1e2d3c-aaaa-bbbb-cccc-1234567890ab"
SECRET = "arn:aws:secretsmanager:us-east-1:123456789012:secret:redshift-sync-AbCdEf"
MSK = "arn:aws:kafka:us-east-1:123456789012:cluster/demo/abc-1"


class Stack:
    """A template with its parameters and conditions resolved."""

    def __init__(self, path: Path, **params: str):
        self.template = cfn_yaml.load(str(path))
        declared = self.template["Parameters"]
        self.params = {k: str(v.get("Default", "")) for k, v in declared.items()} | params
        assert set(params) <= set(declared), set(params) - set(declared)
        self.conditions: dict[str, bool] = {}
        for name, expr in self.template.get("Conditions", {}).items():
            self.conditions[name] = self.resolve(expr)

    def resolve(self, node):
        if isinstance(node, list):
            return [v for v in (self.resolve(x) for x in node) if v is not NO_VALUE]
        if not isinstance(node, dict):
            return node
        if len(node) == 1:
            (key, arg), = node.items()
            if key == "Ref":
                return NO_VALUE if arg == "AWS::NoValue" else PSEUDO.get(arg) or self.params.get(arg, f"<{arg}>")
            if key == "Fn::If":
                cond, yes, no = arg
                return self.resolve(yes if self.conditions[cond] else no)
            if key == "Condition":
                return self.conditions[arg]
            if key == "Fn::Equals":
                a, b = (self.resolve(x) for x in arg)
                return a == b
            if key == "Fn::Not":
                return not self.resolve(arg[0])
            if key == "Fn::And":
                return all(self.resolve(x) for x in arg)
            if key == "Fn::Or":
                return any(self.resolve(x) for x in arg)
            if key == "Fn::GetAtt":
                return f"<{arg[0]}.{arg[1]}>"
            if key == "Fn::Split":
                return self.resolve(arg[1]).split(arg[0])
            if key == "Fn::Select":
                return self.resolve(arg[1])[int(arg[0])]
            if key == "Fn::Sub":
                text, extra = (arg, {}) if isinstance(arg, str) else (arg[0], self.resolve(arg[1]))
                return re.sub(r"\$\{([^}]+)\}", lambda m: str(extra.get(m[1]) or self.resolve({"Ref": m[1]})), text)
        return {k: v for k, v in ((k, self.resolve(v)) for k, v in node.items()) if v is not NO_VALUE}

    def properties(self, resource: str) -> dict:
        return self.resolve(self.template["Resources"][resource]["Properties"])

    def statements(self, resource: str) -> list[dict]:
        return [s for p in self.properties(resource)["Policies"] for s in p["PolicyDocument"]["Statement"]]

    def grants(self, resource: str) -> dict[str, list[str]]:
        """action -> resources it is allowed on."""
        out: dict[str, list[str]] = {}
        for st in self.statements(resource):
            assert st["Effect"] == "Allow"
            for action in [st["Action"]] if isinstance(st["Action"], str) else st["Action"]:
                out.setdefault(action, []).extend([st["Resource"]] if isinstance(st["Resource"], str) else st["Resource"])
        return out


def test_cfn_lint_passes():
    cfn_lint = Path(sys.executable).parent / "cfn-lint"
    templates = sorted(str(p) for p in DEPLOY.glob("*.yaml"))
    assert len(templates) == 3
    done = subprocess.run([str(cfn_lint), *templates], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


# The Data API calls the handler makes (see sync/data_api.py) and nothing more.
DATA_API = {"redshift-data:ExecuteStatement", "redshift-data:DescribeStatement",
            "redshift-data:CancelStatement", "redshift-data:GetStatementResult"}


@pytest.mark.parametrize(
    "params, credential_grant",
    [
        ({"WorkgroupArn": WORKGROUP}, {"redshift-serverless:GetCredentials": [WORKGROUP]}),
        ({"WorkgroupArn": WORKGROUP, "SecretArn": SECRET}, {"secretsmanager:GetSecretValue": [SECRET]}),
        ({"ClusterIdentifier": "prod", "SecretArn": SECRET}, {"secretsmanager:GetSecretValue": [SECRET]}),
        ({"ClusterIdentifier": "prod", "DbUser": "sync_user"}, {"redshift:GetClusterCredentials": [
            "arn:aws:redshift:us-east-1:123456789012:dbuser:prod/sync_user",
            "arn:aws:redshift:us-east-1:123456789012:dbname:prod/dev"]}),
        ({"ClusterIdentifier": "prod"}, {"redshift:GetClusterCredentialsWithIAM": [
            "arn:aws:redshift:us-east-1:123456789012:dbname:prod/dev"]}),
    ],
)
def test_the_role_grants_only_what_the_handler_uses(params, credential_grant):
    stack = Stack(DEPLOY / "lambda.yaml", CodeS3Bucket="b", **params)
    grants = stack.grants("ExecutionRole")
    warehouse = params.get("WorkgroupArn") or f"arn:aws:redshift:us-east-1:123456789012:cluster:{params['ClusterIdentifier']}"
    assert grants.pop("redshift-data:ExecuteStatement") == [warehouse]
    for action in DATA_API - {"redshift-data:ExecuteStatement"}:
        assert grants.pop(action) == ["*"]  # these take no resource; the Data API scopes them to the caller
    assert grants.pop("logs:CreateLogStream") == grants.pop("logs:PutLogEvents") == ["<LogGroup.Arn>"]
    assert grants == credential_grant


@pytest.mark.parametrize(
    "params, expected",
    [
        ({"WorkgroupArn": WORKGROUP, "Database": "analytics"}, {"WorkgroupName": WORKGROUP, "Database": "analytics"}),
        ({"ClusterIdentifier": "prod", "DbUser": "sync_user"}, {"ClusterIdentifier": "prod", "DbUser": "sync_user", "Database": "dev"}),
        ({"ClusterIdentifier": "prod", "SecretArn": SECRET}, {"ClusterIdentifier": "prod", "SecretArn": SECRET, "Database": "dev"}),
    ],
)
def test_the_function_environment_configures_the_handler(params, expected):
    fn = Stack(DEPLOY / "lambda.yaml", CodeS3Bucket="b", **params).properties("Function")
    module, _, name = fn["Handler"].rpartition(".")
    assert module == lambda_handler.__name__ and callable(getattr(lambda_handler, name))
    assert fn["Runtime"] == "python3.12"
    settings = lambda_handler.Settings.from_env({k: str(v) for k, v in fn["Environment"]["Variables"].items()})
    request = settings.target.request("CALL x()", "n")
    assert {k: v for k, v in request.items() if k not in ("Sql", "StatementName")} == expected
    assert settings.policy.max_attempts == 4 and settings.polling.margin_ms == 30_000
    assert settings.config_path == lambda_handler.PACKAGED_CONFIG


def test_schedule_alarm_and_no_lambda_retries():
    stack = Stack(DEPLOY / "lambda.yaml", CodeS3Bucket="b", ClusterIdentifier="prod", ScheduleExpression="rate(10 minutes)",
                  AlarmTopicArn="arn:aws:sns:us-east-1:123456789012:oncall")
    assert stack.properties("Schedule")["ScheduleExpression"] == "rate(10 minutes)"
    assert stack.properties("Schedule")["Targets"][0]["Arn"] == "<Function.Arn>"
    assert stack.properties("SchedulePermission")["Principal"] == "events.amazonaws.com"
    alarm = stack.properties("FailedInvocationsAlarm")
    assert (alarm["Namespace"], alarm["MetricName"], alarm["AlarmActions"]) == (
        "AWS/Lambda", "Errors", ["arn:aws:sns:us-east-1:123456789012:oncall"])
    assert stack.properties("AsyncConfig")["MaximumRetryAttempts"] == 0
    quiet = Stack(DEPLOY / "lambda.yaml", CodeS3Bucket="b", ClusterIdentifier="prod").properties("FailedInvocationsAlarm")
    assert "AlarmActions" not in quiet


def test_the_streaming_role_reads_only_the_one_cluster():
    stack = Stack(DEPLOY / "redshift-streaming-role.yaml", MskClusterArn=MSK, TopicPattern="salesdb.*")
    grants = stack.grants("StreamingRole")
    topics = [MSK, "arn:aws:kafka:us-east-1:123456789012:topic/demo/abc-1/salesdb.*"]
    for action in ("kafka-cluster:Connect", "kafka-cluster:DescribeTopic", "kafka-cluster:ReadData"):
        assert grants.pop(action) == topics
    for action in ("kafka-cluster:AlterGroup", "kafka-cluster:DescribeGroup"):
        assert grants.pop(action) == ["arn:aws:kafka:us-east-1:123456789012:group/demo/abc-1/*"]
    assert grants == {"kafka:GetBootstrapBrokers": [MSK]}
    trust = stack.properties("StreamingRole")["AssumeRolePolicyDocument"]["Statement"][0]
    assert "redshift.amazonaws.com" in trust["Principal"]["Service"]
