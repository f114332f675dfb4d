"""Files → extracted text → chunks with code-point spans → embedded rows."""
