"""Refuse, saying what to do, a project that imports this app's models without the app
in ``INSTALLED_APPS``: ``publish_on`` in another app's ``ready()``, or ``enqueue`` in a
script. Django's own error names a model class and an ``app_label``, and every
``manage.py`` command failed with it."""

from django.apps import apps
from django.core.exceptions import ImproperlyConfigured

APP = "django_durable_jobs"


def require_installed() -> None:
    """Raise ``ImproperlyConfigured`` unless this app is installed (once the installed
    apps are known: earlier, Django raises ``AppRegistryNotReady`` itself)."""
    if apps.apps_ready and not apps.is_installed(APP):
        raise ImproperlyConfigured(
            f"add {APP!r} to INSTALLED_APPS (then run `manage.py migrate`): its models "
            "hold the runs, steps and events that publish_on, enqueue and the worker use"
        )


require_installed()  # before the models below are defined
