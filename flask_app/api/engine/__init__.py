"""The Engine collections API: namespaces, collections, files, `:answer`
with span citations, `:readSpans` and `/info` (spec: engine-answer.md)."""
