"""The files gluon_lr writes and migrate reads, one module each: ``settings`` (the settings file: schema, writer,
reader and validator), ``states`` (the trainer states file: header, reader, writer) and ``atomic`` (the one atomic
writer of the project)."""
