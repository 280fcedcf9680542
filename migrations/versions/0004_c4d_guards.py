"""C4D guards: announced job pauses and hosts' telemetry state

Revision ID: 0004_c4d_guards
Revises: 0003_job_progress
Create Date: 2026-12-01 22:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004_c4d_guards"
down_revision = "0003_job_progress"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "job_pauses",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("job", sa.String(length=200), nullable=False),
        sa.Column("from_us", sa.BigInteger(), nullable=False),
        sa.Column("until_us", sa.BigInteger(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("created_at_us", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("job_pauses", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_job_pauses_job"), ["job"], unique=False)
        batch_op.create_index(batch_op.f("ix_job_pauses_until_us"), ["until_us"], unique=False)
    op.create_table(
        "host_telemetry",
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("last_heard_us", sa.BigInteger(), nullable=False),
        sa.Column("gap_since_us", sa.BigInteger(), nullable=True),
        sa.Column("changed_at_us", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("name"),
    )


def downgrade() -> None:
    op.drop_table("host_telemetry")
    with op.batch_alter_table("job_pauses", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_job_pauses_until_us"))
        batch_op.drop_index(batch_op.f("ix_job_pauses_job"))
    op.drop_table("job_pauses")
