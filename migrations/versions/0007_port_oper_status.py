"""Switch ports' IF-MIB ifOperStatus as their switch agent reports it

Revision ID: 0007_port_oper_status
Revises: 0006_bound_epoch
Create Date: 2026-12-02 07:20:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007_port_oper_status"
down_revision = "0006_bound_epoch"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("switch_port_counters", schema=None) as batch_op:
        batch_op.add_column(sa.Column("oper_status", sa.String(length=32), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("switch_port_counters", schema=None) as batch_op:
        batch_op.drop_column("oper_status")
