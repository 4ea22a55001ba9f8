from textkit import camel_case, kebab_case, snake_case, split_words, title_case


def test_split_words():
    assert split_words("HTTPServerError") == ["HTTP", "Server", "Error"]
    assert split_words("user_id-2") == ["user", "id", "2"]


def test_snake_and_kebab():
    assert snake_case("HTTPServerError") == "http_server_error"
    assert kebab_case("someValue here") == "some-value-here"


def test_camel_case():
    assert camel_case("user_id") == "userId"
    assert camel_case("") == ""


def test_title_case():
    assert title_case("the lord of the rings") == "The Lord of the Rings"
