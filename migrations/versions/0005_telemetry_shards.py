"""Telemetry sharded across replicas: the inbox every replica writes and the shard owners
read; one alarm that is not resolved per incident (handover-safe)

Revision ID: 0005_telemetry_shards
Revises: 0004_c4d_guards
Create Date: 2026-12-02 01:15:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005_telemetry_shards"
down_revision = "0004_c4d_guards"
branch_labels = None
depends_on = None

OPEN = sa.text("state <> 'resolved'")


def upgrade() -> None:
    op.create_table(
        "telemetry_inbox",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("shard", sa.Integer(), nullable=False),
        sa.Column("arrival_us", sa.BigInteger(), nullable=False),
        sa.Column("host", sa.String(length=200), nullable=False),
        sa.Column("records", sa.Integer(), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("telemetry_inbox", schema=None) as batch_op:
        batch_op.create_index("ix_telemetry_inbox_shard_arrival", ["shard", "arrival_us"], unique=False)
    with op.batch_alter_table("alarms", schema=None) as batch_op:
        batch_op.add_column(sa.Column("incident", sa.String(length=400), nullable=True))
    alarms = sa.table("alarms", sa.column("id", sa.Integer()), sa.column("incident_key", sa.String()),
                      sa.column("incident", sa.String()), sa.column("state", sa.String()))
    conn = op.get_bind()
    rows = conn.execute(sa.select(alarms.c.id, alarms.c.incident_key, alarms.c.state).order_by(alarms.c.id)).all()
    open_incidents: set[str] = set()
    for row_id, key, state in rows:
        incident = key.rsplit("/", 1)[0] if "/" in key else key
        values: dict[str, object] = {"incident": incident}
        if state != "resolved":
            if incident in open_incidents:  # a later duplicate: the first stays open
                values["state"] = "resolved"
            open_incidents.add(incident)
        conn.execute(sa.update(alarms).where(alarms.c.id == row_id).values(**values))
    with op.batch_alter_table("alarms", schema=None) as batch_op:
        batch_op.alter_column("incident", existing_type=sa.String(length=400), nullable=False)
        batch_op.create_index("ux_alarms_open_incident", ["incident"], unique=True,
                              postgresql_where=OPEN, sqlite_where=OPEN)


def downgrade() -> None:
    with op.batch_alter_table("alarms", schema=None) as batch_op:
        batch_op.drop_index("ux_alarms_open_incident", postgresql_where=OPEN, sqlite_where=OPEN)
        batch_op.drop_column("incident")
    with op.batch_alter_table("telemetry_inbox", schema=None) as batch_op:
        batch_op.drop_index("ix_telemetry_inbox_shard_arrival")
    op.drop_table("telemetry_inbox")
