"""Tests of migrate.data: MXNet RecordIO datasets read without MXNet."""
