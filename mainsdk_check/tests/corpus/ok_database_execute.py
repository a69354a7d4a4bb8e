# expect: none
import sqlite3


def fetch(connection: sqlite3.Connection, name: str) -> list[tuple[object, ...]]:
    return connection.execute("SELECT * FROM users WHERE name = ?", (name,)).fetchall()
