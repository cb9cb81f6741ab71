"""The CloudFormation templates under deploy/: cfn-lint clean, parliament clean, and what
they grant, configure and refuse once resolved for each way of authenticating (a small
evaluator of the intrinsic and rule functions they use stands in for CloudFormation)."""

from __future__ import annotations

import importlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from cfnlint.decode import cfn_yaml

from sync.aws import lambda_handler
from tests.helpers import REPO

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
        for name, spec in declared.items():  # CloudFormation splits these on commas
            if spec["Type"] == "CommaDelimitedList":
                self.params[name] = self.params[name].split(",")
        self.conditions: dict[str, bool] = {}
        for name, expr in self.template.get("Conditions", {}).items():
            self.conditions[name] = self.resolve(expr)

    def resolve(self, node):
        if isinstance(node, list):
            return [v for v in (self.resolve(x) for x in node) if v is not NO_VALUE]
        if not isinstance(node, dict):
            return node
        if len(node) == 1:
            ((key, arg),) = node.items()
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
            if key == "Fn::Contains":  # a rule function: the string is one of the list's
                values, value = self.resolve(arg[0]), self.resolve(arg[1])
                return value in values
            if key == "Fn::GetAtt":
                return f"<{arg[0]}.{arg[1]}>"
            if key == "Fn::Join":
                return arg[0].join(self.resolve(arg[1]))
            if key == "Fn::Split":
                return self.resolve(arg[1]).split(arg[0])
            if key == "Fn::Select":
                return self.resolve(arg[1])[int(arg[0])]
            if key == "Fn::Sub":
                text, extra = (arg, {}) if isinstance(arg, str) else (arg[0], self.resolve(arg[1]))
                return re.sub(r"\$\{([^}]+)\}", lambda m: str(extra.get(m[1]) or self.resolve({"Ref": m[1]})), text)
        return {k: v for k, v in ((k, self.resolve(v)) for k, v in node.items()) if v is not NO_VALUE}

    def failed_rules(self) -> list[str]:
        """The AssertDescription of every rule assertion these parameters break (CloudFormation
        refuses the stack with them; "AWS rule functions", CloudFormation User Guide,
        https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/intrinsic-function-reference-rules.html)."""
        out = []
        for rule in self.template.get("Rules", {}).values():
            if "RuleCondition" in rule and not self.resolve(rule["RuleCondition"]):
                continue
            out += [a["AssertDescription"] for a in rule["Assertions"] if not self.resolve(a["Assert"])]
        return out

    def allowed(self, name: str, value: str) -> bool:
        """Whether CloudFormation accepts `value` for parameter `name` (AllowedValues, AllowedPattern)."""
        declared = self.template["Parameters"][name]
        if "AllowedValues" in declared and value not in [str(v) for v in declared["AllowedValues"]]:
            return False
        return "AllowedPattern" not in declared or re.fullmatch(declared["AllowedPattern"], value) is not None

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


# The Data API calls the handler makes (see sync/aws/data_api.py) and nothing more.
DATA_API = {
    "redshift-data:ExecuteStatement",
    "redshift-data:DescribeStatement",
    "redshift-data:CancelStatement",
    "redshift-data:GetStatementResult",
}


@pytest.mark.parametrize(
    "params, credential_grant",
    [
        ({"WorkgroupArn": WORKGROUP}, {"redshift-serverless:GetCredentials": [WORKGROUP]}),
        ({"WorkgroupArn": WORKGROUP, "SecretArn": SECRET}, {"secretsmanager:GetSecretValue": [SECRET]}),
        ({"ClusterIdentifier": "prod", "SecretArn": SECRET}, {"secretsmanager:GetSecretValue": [SECRET]}),
        (
            {"ClusterIdentifier": "prod", "DbUser": "sync_user"},
            {
                "redshift:GetClusterCredentials": [
                    "arn:aws:redshift:us-east-1:123456789012:dbuser:prod/sync_user",
                    "arn:aws:redshift:us-east-1:123456789012:dbname:prod/dev",
                ]
            },
        ),
        (
            {"ClusterIdentifier": "prod"},
            {"redshift:GetClusterCredentialsWithIAM": ["arn:aws:redshift:us-east-1:123456789012:dbname:prod/dev"]},
        ),
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
        (
            {"ClusterIdentifier": "prod", "DbUser": "sync_user"},
            {"ClusterIdentifier": "prod", "DbUser": "sync_user", "Database": "dev"},
        ),
        (
            {"ClusterIdentifier": "prod", "SecretArn": SECRET},
            {"ClusterIdentifier": "prod", "SecretArn": SECRET, "Database": "dev"},
        ),
    ],
)
def test_the_function_environment_configures_the_handler(params, expected):
    fn = Stack(DEPLOY / "lambda.yaml", CodeS3Bucket="b", **params).properties("Function")
    # The stable entry point (sync/lambda_handler.py), the same function as the Lambda's code.
    module, _, name = fn["Handler"].rpartition(".")
    assert module == "sync.lambda_handler"
    assert getattr(importlib.import_module(module), name) is lambda_handler.handler
    assert fn["Runtime"] == "python3.12"
    settings = lambda_handler.Settings.from_env({k: str(v) for k, v in fn["Environment"]["Variables"].items()})
    request = settings.target.request("CALL x()", "n")
    assert {k: v for k, v in request.items() if k not in ("Sql", "StatementName")} == expected
    assert settings.policy.max_attempts == 4 and settings.polling.margin_ms == 30_000
    assert (settings.pacing.max_concurrent_calls, settings.pacing.execute_per_second, settings.pacing.describe_per_second) == (
        10,
        5,
        10,
    )
    assert settings.config_path == lambda_handler.PACKAGED_CONFIG
    # The template's smallest margin still covers one Data API request at its slowest.
    smallest = min(Stack(DEPLOY / "lambda.yaml").template["Parameters"]["DeadlineMarginSeconds"]["AllowedValues"])
    assert smallest * 1000 >= settings.timeouts.worst_case_ms() + 1000


def test_schedule_alarm_and_no_lambda_retries():
    stack = Stack(
        DEPLOY / "lambda.yaml",
        CodeS3Bucket="b",
        ClusterIdentifier="prod",
        ScheduleMinutes="10",
        AlarmTopicArn="arn:aws:sns:us-east-1:123456789012:oncall",
    )
    assert stack.properties("Schedule")["ScheduleExpression"] == "rate(10 minutes)"
    assert stack.properties("Schedule")["Targets"][0]["Arn"] == "<Function.Arn>"
    assert "Input" not in stack.properties("Schedule")["Targets"][0]  # every table of the packaged pipeline file
    assert stack.properties("SchedulePermission")["Principal"] == "events.amazonaws.com"
    alarm = stack.properties("FailedInvocationsAlarm")
    assert (alarm["Namespace"], alarm["MetricName"], alarm["AlarmActions"]) == (
        "AWS/Lambda",
        "Errors",
        ["arn:aws:sns:us-east-1:123456789012:oncall"],
    )
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
    # The Service Authorization Reference lists no resource type for kafka:GetBootstrapBrokers
    # (https://docs.aws.amazon.com/service-authorization/latest/reference/list_amazonmanagedstreamingforapachekafka.html):
    # only "*" matches it.
    assert grants == {"kafka:GetBootstrapBrokers": ["*"]}
    trust = stack.properties("StreamingRole")["AssumeRolePolicyDocument"]["Statement"][0]
    assert "redshift.amazonaws.com" in trust["Principal"]["Service"]


LAMBDA_VALUES = {"WorkgroupArn": WORKGROUP, "CodeS3Bucket": "b"}


@pytest.mark.parametrize(
    "timeout, margin, broken",
    [
        ("60", "45", False),
        ("60", "60", True),
        ("60", "90", True),
        ("240", "30", False),
        ("240", "240", True),
        ("900", "300", False),
        ("120", "120", True),
    ],
)
def test_a_margin_at_or_over_the_timeout_is_refused(timeout, margin, broken):
    """A margin at or over the timeout would cancel every CALL the moment it starts."""
    stack = Stack(
        DEPLOY / "lambda.yaml", **LAMBDA_VALUES, TimeoutSeconds=timeout, DeadlineMarginSeconds=margin, ScheduleMinutes="30"
    )
    failed = stack.failed_rules()
    assert bool(failed) == broken, failed
    if broken:
        assert failed == [next(d for d in failed if "DeadlineMarginSeconds must be below" in d)]


def test_every_timeout_and_margin_pair_is_checked():
    template = Stack(DEPLOY / "lambda.yaml").template
    timeouts = template["Parameters"]["TimeoutSeconds"]["AllowedValues"]
    margins = template["Parameters"]["DeadlineMarginSeconds"]["AllowedValues"]
    for t in timeouts:
        for m in margins:
            stack = Stack(
                DEPLOY / "lambda.yaml", **LAMBDA_VALUES, TimeoutSeconds=str(t), DeadlineMarginSeconds=str(m), ScheduleMinutes="60"
            )
            assert bool(stack.failed_rules()) == (m >= t), (t, m)


@pytest.mark.parametrize(
    "minutes, timeout, broken",
    [
        ("5", "240", False),
        ("5", "300", True),
        ("2", "120", True),
        ("15", "840", False),
        ("15", "900", True),
        ("60", "900", False),
    ],
)
def test_a_timeout_at_or_over_the_schedule_interval_is_refused(minutes, timeout, broken):
    stack = Stack(
        DEPLOY / "lambda.yaml", **LAMBDA_VALUES, ScheduleMinutes=minutes, TimeoutSeconds=timeout, DeadlineMarginSeconds="20"
    )
    failed = stack.failed_rules()
    assert bool(failed) == broken, failed
    assert stack.properties("Schedule")["ScheduleExpression"] == f"rate({minutes} minutes)"


def test_the_defaults_pass_the_rules_and_run_one_at_a_time():
    stack = Stack(DEPLOY / "lambda.yaml", **LAMBDA_VALUES)
    assert stack.failed_rules() == []
    fn = stack.properties("Function")
    assert fn["ReservedConcurrentExecutions"] == 1  # a second scheduled start is throttled, never run beside the first
    assert int(fn["Timeout"]) < int(stack.params["ScheduleMinutes"]) * 60
    assert stack.properties("AsyncConfig")["MaximumRetryAttempts"] == 0


@pytest.mark.parametrize(
    "namespace, ok",
    [
        ("RedshiftSync", True),
        ("Acme/Redshift Sync:prod", True),
        ("AWS/Lambda", False),
        ("AWS/RedshiftSync", False),
        ("", False),
        (":x", False),
        ("Syncé", False),
        ("x" * 255, True),
        ("x" * 256, False),
    ],
)
def test_the_metrics_namespace_cannot_be_an_aws_one(namespace, ok):
    """PutMetricData's Namespace (CloudWatch API Reference): ASCII without control characters,
    1-255 long, pattern [^:].*, and "you should not specify a namespace that begins with AWS/"."""
    assert Stack(DEPLOY / "lambda.yaml").allowed("MetricsNamespace", namespace) == ok


def test_dashboard_and_alarms_watch_the_handlers_metrics():
    stack = Stack(DEPLOY / "lambda.yaml", **LAMBDA_VALUES, MetricsNamespace="Acme/Sync", LagAlarmSeconds="600")
    body = json.loads(stack.properties("Dashboard")["DashboardBody"])
    expressions = " ".join(m[0]["expression"] for w in body["widgets"] for m in w["properties"]["metrics"])
    line = lambda_handler.metric_line(
        {
            "table": "t",
            "status": "ok",
            "events_read": 1,
            "upserted": 1,
            "deleted": 0,
            "quarantined": 0,
            "attempts": 1,
            "api_retries": 0,
            "duration_seconds": 0.1,
            "lag_seconds": 1.0,
        },
        "Acme/Sync",
        0,
    )
    emitted = {m["Name"] for m in line["_aws"]["CloudWatchMetrics"][0]["Metrics"]}
    for metric in ("Upserted", "Deleted", "LagSeconds", "Quarantined", "Failed", "NotStarted", "ApiRetries"):
        assert metric in emitted and f'{{Acme/Sync,Table}} MetricName="{metric}"' in expressions, metric
    assert [] in line["_aws"]["CloudWatchMetrics"][0]["Dimensions"]  # the alarms watch the metrics without a dimension
    for alarm, metric in (("LagAlarm", "LagSeconds"), ("QuarantineAlarm", "Quarantined"), ("NotStartedAlarm", "NotStarted")):
        props = stack.properties(alarm)
        assert (props["Namespace"], props["MetricName"]) == ("Acme/Sync", metric) and "Dimensions" not in props
        assert metric in emitted
    assert stack.properties("LagAlarm")["Threshold"] == "600"


# A table's run that read nothing, as the handler hands it to metric_line.
QUIET_RUN = {
    "table": "t",
    "status": "ok",
    "events_read": 0,
    "upserted": 0,
    "deleted": 0,
    "quarantined": 0,
    "attempts": 1,
    "duration_seconds": 0.1,
    "lag_seconds": None,
}
STALLED = {"state": "stalled", "source_alive_seconds": 12.0, "lag_seconds": 900.0}
BREAK = {"message": "t: ordering break: ... Run `redshift-sync reset-positions --table t --yes`"}


@pytest.mark.parametrize(
    ("found", "alarm", "metric", "value", "threshold"),
    [
        ({"freshness": STALLED}, "HeartbeatAlarm", "HeartbeatAgeSeconds", 12.0, "420"),
        ({"freshness": STALLED}, "StalledAlarm", "Stalled", 1, 1),
        ({"ordering_break": BREAK}, "OrderingBreakAlarm", "OrderingBreak", 1, 1),
        ({"lost_records": [{"missing": 5, "message": "t: records lost"}] * 2}, "RecordsLostAlarm", "RecordsLost", 10, 1),
    ],
)
def test_the_health_alarms_and_widgets_watch_the_handlers_metrics(found, alarm, metric, value, threshold):
    stack = Stack(DEPLOY / "lambda.yaml", **LAMBDA_VALUES, MetricsNamespace="Acme/Sync", HeartbeatAlarmSeconds="420")
    body = json.loads(stack.properties("Dashboard")["DashboardBody"])
    expressions = " ".join(m[0]["expression"] for w in body["widgets"] for m in w["properties"]["metrics"])
    line = lambda_handler.metric_line({**QUIET_RUN, **found}, "Acme/Sync", 0)
    assert metric in {m["Name"] for m in line["_aws"]["CloudWatchMetrics"][0]["Metrics"]} and line[metric] == value
    assert f'{{Acme/Sync,Table}} MetricName="{metric}"' in expressions
    props = stack.properties(alarm)
    assert (props["Namespace"], props["MetricName"], props["Threshold"]) == ("Acme/Sync", metric, threshold)
    assert "Dimensions" not in props and props["TreatMissingData"] == "notBreaching"


def test_the_health_properties_of_a_metric_line():
    line = lambda_handler.metric_line({**QUIET_RUN, "freshness": STALLED, "ordering_break": BREAK}, "NS", 0)
    assert (line["freshness"], line["CaptureDown"], line["WaitingSeconds"]) == ("stalled", 0, 900.0)
    assert "reset-positions --table t" in line["ordering_break"]
    quiet = lambda_handler.metric_line(QUIET_RUN, "NS", 0)  # no [heartbeat], no check: no metric
    assert not {"HeartbeatAgeSeconds", "Stalled", "OrderingBreak", "RecordsLost"} & set(quiet)


def resolved_policies() -> list[tuple[str, dict]]:
    out = []
    for params in (
        {"WorkgroupArn": WORKGROUP},
        {"WorkgroupArn": WORKGROUP, "SecretArn": SECRET},
        {"ClusterIdentifier": "prod", "DbUser": "sync_user"},
        {"ClusterIdentifier": "prod"},
    ):
        stack = Stack(DEPLOY / "lambda.yaml", CodeS3Bucket="b", **params)
        out += [(f"lambda {params}", p["PolicyDocument"]) for p in stack.properties("ExecutionRole")["Policies"]]
    stack = Stack(DEPLOY / "redshift-streaming-role.yaml", MskClusterArn=MSK, TopicPattern="salesdb.*")
    out += [("streaming role", p["PolicyDocument"]) for p in stack.properties("StreamingRole")["Policies"]]
    return out


def test_parliament_finds_nothing_in_the_resolved_policies():
    """parliament checks actions against the IAM definitions of the Service Authorization
    Reference: unknown actions, resources an action cannot take (RESOURCE_MISMATCH, which the
    old GetBootstrapBrokers-on-a-cluster-ARN grant raised), malformed ARNs."""
    from parliament import analyze_policy_string

    for name, document in resolved_policies():
        document = json.loads(
            json.dumps(document).replace(
                "<LogGroup.Arn>", "arn:aws:logs:us-east-1:123456789012:log-group:/aws/lambda/redshift-sync:*"
            )
        )
        findings = [(f.issue, f.detail) for f in analyze_policy_string(json.dumps(document)).findings]
        assert findings == [], (name, findings)
    old = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "kafka:GetBootstrapBrokers", "Resource": MSK}]}
    assert [f.issue for f in analyze_policy_string(json.dumps(old)).findings] == ["RESOURCE_MISMATCH"]


def test_schedule_tables_become_the_event_the_handler_reads():
    stack = Stack(DEPLOY / "lambda.yaml", **LAMBDA_VALUES, ScheduleTables="customer,orders")
    (target,) = stack.properties("Schedule")["Targets"]
    assert lambda_handler.event_tables(json.loads(target["Input"])) == ["customer", "orders"]
