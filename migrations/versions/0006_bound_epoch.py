"""Stored bounds lowered at read time: one fabric-wide bound epoch, flows per NIC of the
active jobs, and the epoch each job's bound was proven at

Revision ID: 0006_bound_epoch
Revises: 0005_telemetry_shards
Create Date: 2026-12-02 04:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006_bound_epoch"
down_revision = "0005_telemetry_shards"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Empty: the first job POST or DELETE counts the active jobs' flows per NIC and starts the
    # epoch (a job whose columns are null was proven at the epoch's start).
    op.create_table(
        "bound_epoch",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("log_scale", sa.Float(), nullable=False),
        sa.Column("drops", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_table(
        "nic_flows",
        sa.Column("host", sa.String(length=200), nullable=False),
        sa.Column("nic", sa.String(length=100), nullable=False),
        sa.Column("flows", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("host", "nic"),
    )
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("bound_log_scale", sa.Float(), nullable=True))
        batch_op.add_column(sa.Column("bound_drops", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_column("bound_drops")
        batch_op.drop_column("bound_log_scale")
    op.drop_table("nic_flows")
    op.drop_table("bound_epoch")
