"""edgerag: a RAG server for edge machines (`flask_app.app.create_app`)."""
