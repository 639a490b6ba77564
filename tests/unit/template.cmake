# Chat templates: the Jinja-subset renderer (src/model/template). Reference renderings come from Python jinja2
# configured as transformers does (tools/gen_template_goldens.py -> tests/data/templates/goldens.json).
weft_add_test(test_template SOURCES test_template.c LIBS weft_template PkgConfig::JANSSON)
weft_add_test(test_template_errors SOURCES test_template_errors.c LIBS weft_template PkgConfig::JANSSON)
