"""switch port counters, link-direction samples and congestion state (issue 13)

Revision ID: 0002_link_telemetry
Revises: 0001
Create Date: 2026-11-30 21:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002_link_telemetry"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "switch_port_counters",
        sa.Column("switch", sa.String(length=200), nullable=False),
        sa.Column("port", sa.String(length=200), nullable=False),
        sa.Column("t_us", sa.BigInteger(), nullable=False),
        sa.Column("epoch", sa.String(length=64), nullable=True),
        sa.Column("counters", sa.JSON(), nullable=False),
        sa.Column("rates", sa.JSON(), nullable=False),
        sa.Column("interval_us", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("switch", "port"),
    )
    op.create_table(
        "link_samples",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("link", sa.String(length=400), nullable=False),
        sa.Column("direction", sa.String(length=2), nullable=False),
        sa.Column("t_us", sa.BigInteger(), nullable=False),
        sa.Column("interval_us", sa.BigInteger(), nullable=False),
        sa.Column("source", sa.String(length=420), nullable=False),
        sa.Column("side", sa.String(length=2), nullable=False),
        sa.Column("raw", sa.JSON(), nullable=False),
        sa.Column("smoothed", sa.JSON(), nullable=False),
        sa.Column("congested", sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("link_samples", schema=None) as batch_op:
        batch_op.create_index("ix_link_samples_series", ["link", "direction", "t_us"], unique=False)
        batch_op.create_index(batch_op.f("ix_link_samples_t_us"), ["t_us"], unique=False)
    op.create_table(
        "link_direction_states",
        sa.Column("link", sa.String(length=400), nullable=False),
        sa.Column("direction", sa.String(length=2), nullable=False),
        sa.Column("t_us", sa.BigInteger(), nullable=False),
        sa.Column("congested", sa.Boolean(), nullable=False),
        sa.Column("state", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("link", "direction"),
    )


def downgrade() -> None:
    op.drop_table("link_direction_states")
    with op.batch_alter_table("link_samples", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_link_samples_t_us"))
        batch_op.drop_index("ix_link_samples_series")
    op.drop_table("link_samples")
    op.drop_table("switch_port_counters")
