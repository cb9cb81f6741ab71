"""Reproducible benchmarks of redshift-sync on the embedded PostgreSQL.

`python -m benchmarks [--quick] [--out results.json]` builds its workloads with SQL in a
dedicated, temporary PostgreSQL, measures the generated merge procedure side by side
with the usual alternatives, prints a table and writes every figure as JSON.
"""
