"""salesdb pipeline: schemas, control tables, customer and orders

Revision ID: 474a94aea2c7
Revises: 
Create Date: 2026-11-21 21:24:14.063453

Upgrade:
    r.create_pipeline()
    r.create_table("customer")
    r.create_table("orders")
Downgrade:
    r.drop_table("orders")
    r.drop_table("customer")
    r.drop_pipeline()
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Union

from sync.schema.migrate import Revision

# revision identifiers, used by Alembic.
revision: str = '474a94aea2c7'
down_revision: Union[str, Sequence[str], None] = None
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None

# The pipeline this revision brings the warehouse to, with fingerprints of the SQL the
# generator rendered from it. The generator renders every statement below from this
# state when the revision runs; `redshift-sync revision` compares the next pipeline file
# (and the generator installed then) with it.
STATE = {'origin': 'examples/salesdb/pipeline.toml',
 'pipeline': {'pipeline': {'schema': 'cdc'},
              'source': {'kind': 'msk',
                         'external_schema': 'msk_cdc',
                         'cluster_arn': 'arn:aws:kafka:us-east-1:123456789012:cluster/demo/abc-1',
                         'uri': None,
                         'iam_role': 'arn:aws:iam::123456789012:role/redshift-streaming',
                         'authentication': 'iam',
                         'authentication_arn': None,
                         'secret_arn': None},
              'tables': [{'name': 'customer',
                          'topic': 'salesdb.salesdb.CUSTOMER',
                          'format': 'debezium',
                          'primary_key': ['CUST_ID'],
                          'delete_mode': 'hard',
                          'order_by': 'mysql-binlog',
                          'on_truncate': 'ignore',
                          'distkey': 'customer_id',
                          'sortkey': ['customer_id'],
                          'columns': [{'name': 'CUST_ID',
                                       'type': 'varchar(64)',
                                       'target': 'customer_id',
                                       'semantic': None,
                                       'scale': None},
                                      {'name': 'NAME',
                                       'type': 'varchar(256)',
                                       'target': None,
                                       'semantic': None,
                                       'scale': None},
                                      {'name': 'MKTSEGMENT',
                                       'type': 'varchar(64)',
                                       'target': None,
                                       'semantic': None,
                                       'scale': None}]},
                         {'name': 'orders',
                          'topic': 'salesdb.salesdb.ORDERS',
                          'format': 'debezium',
                          'primary_key': ['ORDER_ID'],
                          'delete_mode': 'soft',
                          'order_by': 'mysql-binlog',
                          'on_truncate': 'ignore',
                          'distkey': 'order_id',
                          'sortkey': [],
                          'columns': [{'name': 'ORDER_ID',
                                       'type': 'bigint',
                                       'target': 'order_id',
                                       'semantic': None,
                                       'scale': None},
                                      {'name': 'CUST_ID',
                                       'type': 'varchar(64)',
                                       'target': 'customer_id',
                                       'semantic': None,
                                       'scale': None},
                                      {'name': 'STATUS',
                                       'type': 'varchar(16)',
                                       'target': None,
                                       'semantic': None,
                                       'scale': None},
                                      {'name': 'TOTAL',
                                       'type': 'decimal(12,2)',
                                       'target': None,
                                       'semantic': None,
                                       'scale': None},
                                      {'name': 'PLACED_AT',
                                       'type': 'timestamp',
                                       'target': None,
                                       'semantic': None,
                                       'scale': None}]}]},
 'fingerprints': {'postgres': {'schema cdc.cdc': '82d7c4039e54b208',
                               'function cdc.sync_text': '616ecc5d66e1363a',
                               'function cdc.sync_to_text': '2573d959bf0af17a',
                               'function cdc.sync_to_numeric': '1a167022d956e45f',
                               'function cdc.sync_to_integer': '40b98c8659a6e7ab',
                               'function cdc.sync_to_float': 'ca6449ac1796989d',
                               'function cdc.sync_to_decimal': 'c434f75fa271e8d7',
                               'function cdc.sync_to_boolean': 'e6c66f33271b9630',
                               'function cdc.sync_to_json': 'c730a63e24f4e878',
                               'function cdc.sync_to_bytes': '93a5b94273ae8dfe',
                               'function cdc.sync_to_date': 'd80b1bdc058b67fa',
                               'function cdc.sync_to_timestamp': '9196b1f2a4c9b3fb',
                               'function cdc.sync_to_timestamptz': 'e52fd434b862fdc1',
                               'function cdc.sync_to_time': '24398380bfb4e42f',
                               'function cdc.sync_to_timetz': '8771e2cdbc61c9e4',
                               'function cdc.sync_parse_json': 'd768c0452e7f1e66',
                               'table cdc.sync_run_log': '2cc36682607e621f',
                               'stream cdc.customer__stream': '573054b10f6f95d0',
                               'index cdc.customer__s_pos': '5d7b0c34c314c869',
                               'index cdc.customer__s_rt': 'd2a13e5d32be9391',
                               'table cdc.customer': 'aac48db1c2fee353',
                               'table cdc.customer__stage': '7c275cf2988f75bf',
                               'table cdc.customer__watermark': 'e0c738c44e76125e',
                               'table cdc.customer__quarantine': '1e9d69928b16ba3f',
                               'table cdc.customer__drift': 'bb71656643501c29',
                               'table cdc.customer__deleted': '5b0c9bafc66f8a89',
                               'procedure cdc.incremental_sync_customer(bigint)': '9475d4b234652f26',
                               'procedure cdc.incremental_sync_customer': '8585d9dbeae8823c',
                               'procedure cdc.isolate_record_customer(text)': 'cf30e4a7ecea43de',
                               'stream cdc.orders__stream': '5597b9f3ffb411c8',
                               'index cdc.orders__s_pos': 'e5a408c5189e9a3b',
                               'index cdc.orders__s_rt': '2d247237af65095a',
                               'table cdc.orders': '273fb427f8fde440',
                               'table cdc.orders__stage': '7ff56d2aadf4344a',
                               'table cdc.orders__watermark': 'c678cec43a299d02',
                               'table cdc.orders__quarantine': 'c304ad905efc3ba3',
                               'table cdc.orders__drift': 'ee9085118bae9f82',
                               'procedure cdc.incremental_sync_orders(bigint)': '36b5a8d86b9a9a18',
                               'procedure cdc.incremental_sync_orders': 'c4f46eaa302bc6f2',
                               'procedure cdc.isolate_record_orders(text)': '1d94b59a01ac4c4d',
                               'view cdc.sync_quarantine': '471d61941a3c43cf',
                               'view cdc.sync_schema_drift': '4f458d7253dae8f9'},
                  'redshift': {'setting cdc.session': '28ef23ac96213b6f',
                               'schema cdc.cdc': '82d7c4039e54b208',
                               'external_schema msk_cdc.msk_cdc': '565a439532bed358',
                               'table cdc.sync_run_log': '836fe23fa7b74b92',
                               'stream cdc.customer__stream': '7f3e39a8457097a0',
                               'table cdc.customer': '6e87d5d4a5ec2f96',
                               'table cdc.customer__stage': '6f5a8bd5f76adc87',
                               'table cdc.customer__watermark': 'bcb0d79bfb6be41d',
                               'table cdc.customer__quarantine': '326dc8ae15fb3790',
                               'table cdc.customer__drift': 'bb71656643501c29',
                               'table cdc.customer__deleted': '31cf3778bc703443',
                               'procedure cdc.incremental_sync_customer(bigint)': '4e7c4e004b0576f7',
                               'procedure cdc.incremental_sync_customer': '8585d9dbeae8823c',
                               'procedure cdc.isolate_record_customer(varchar)': 'cb99ca622bce5624',
                               'stream cdc.orders__stream': 'cf4ba8bb80858d1a',
                               'table cdc.orders': '5599f3cc4a001697',
                               'table cdc.orders__stage': '26a31792c8ba0131',
                               'table cdc.orders__watermark': '1888959841ee8c29',
                               'table cdc.orders__quarantine': '16c3314a7a668e62',
                               'table cdc.orders__drift': 'ee9085118bae9f82',
                               'procedure cdc.incremental_sync_orders(bigint)': 'e5897d538e62efe1',
                               'procedure cdc.incremental_sync_orders': 'c4f46eaa302bc6f2',
                               'procedure cdc.isolate_record_orders(varchar)': 'b89b5cff79fe2e1b',
                               'view cdc.sync_quarantine': '6c4e1e47f304c6ae',
                               'view cdc.sync_schema_drift': '120957a8a616c9d2'}}}


def upgrade() -> None:
    """Upgrade schema."""
    r = Revision.up(STATE, down_revision)
    r.create_pipeline()
    r.create_table("customer")
    r.create_table("orders")
    r.replace_views()


def downgrade() -> None:
    """Downgrade schema."""
    r = Revision.down(STATE, down_revision)
    r.drop_views()
    r.drop_table("orders")
    r.drop_table("customer")
    r.drop_pipeline()
