"""Numbered, runnable tutorials (t01..t04) and the main job (demo): each has main(argv) and --fast for the tests."""
