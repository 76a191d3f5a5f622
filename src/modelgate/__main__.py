from modelgate.cli.main import app

app(prog_name="modelgate")
