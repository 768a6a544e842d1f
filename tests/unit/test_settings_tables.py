"""docs/settings.md is what scripts/settings_tables.py generates from the settings' definitions."""

from __future__ import annotations

from support.scripts import SCRIPTS, load_script


def test_the_committed_settings_tables_are_the_generated_ones():
    script = load_script("settings_tables")
    assert script.OUTPUT.read_text(encoding="utf-8") == script.render(), \
        "docs/settings.md is out of date: run .venv/bin/python scripts/settings_tables.py"


def test_every_declared_setting_has_a_row_and_the_readme_links_the_tables():
    script = load_script("settings_tables")
    text = script.render()
    for _, table, _ in script.SECTIONS:
        for name in table:
            assert f"| `{name}` |" in text
    assert "(docs/settings.md)" in (SCRIPTS.parent / "README.md").read_text(encoding="utf-8")
