"""Date and time formats of Boltz's pages and admin (settings.FORMAT_MODULE_PATH): Django's
English locale formats win over the DATETIME_FORMAT setting, so the override is a locale."""
