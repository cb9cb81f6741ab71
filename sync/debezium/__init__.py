"""Debezium's vocabulary: semantic types, the reference decoder, pipeline inference, event builders."""
