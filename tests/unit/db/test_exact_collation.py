"""Which collation compares names and keys exactly (``db/schema.py::exact_collation``),
by database and version: only MariaDB runs in CI, so MySQL's branch is checked here
with a stand-in for Django's connection (the attributes the function reads)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import cast

import pytest
from django.db.backends.base.base import BaseDatabaseWrapper

from django_durable_jobs.db.schema import exact_collation


def connection(vendor: str, **attributes: object) -> BaseDatabaseWrapper:
    return cast(BaseDatabaseWrapper, SimpleNamespace(vendor=vendor, **attributes))


@pytest.mark.parametrize(
    ("version", "collation"),
    [
        ((8, 4, 0), "utf8mb4_0900_bin"),
        ((8, 0, 17), "utf8mb4_0900_bin"),  # the first release with it
        ((8, 0, 16), "utf8mb4_bin"),  # binary, but pads: the best older MySQL has
        ((8, 0, 11), "utf8mb4_bin"),
    ],
)
def test_mysql_gets_its_no_pad_binary_collation_from_8_0_17(
    version: tuple[int, ...], collation: str
) -> None:
    mysql = connection("mysql", mysql_is_mariadb=False, mysql_version=version)
    assert exact_collation(mysql) == collation


def test_mariadb_gets_nopad_bin_whatever_its_version() -> None:
    mariadb = connection("mysql", mysql_is_mariadb=True, mysql_version=(10, 6, 0))
    assert exact_collation(mariadb) == "utf8mb4_nopad_bin"


@pytest.mark.parametrize("vendor", ["postgresql", "sqlite"])
def test_databases_whose_default_is_exact_get_none(vendor: str) -> None:
    assert exact_collation(connection(vendor)) is None
