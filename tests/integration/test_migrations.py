"""`alembic upgrade head` on an empty database, then the models and the migrations agree."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from controller.store.db import make_engine
from controller.store.migrate import current_revision, head_revision, is_at_head
from controller.store.tables import Base


def test_models_and_migrations_agree(database_url: str) -> None:
    engine = make_engine(database_url)
    try:
        assert current_revision(engine) == head_revision() and is_at_head(engine)
        with engine.connect() as conn:
            diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
        assert diff == [], f"models differ from migrations: {diff}"
    finally:
        engine.dispose()
