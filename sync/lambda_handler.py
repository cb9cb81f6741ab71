"""The Lambda entry point as deployed stacks name it (`sync.lambda_handler.handler`);
the handler lives in sync/aws/lambda_handler.py."""

from sync.aws.lambda_handler import handler

__all__ = ["handler"]
