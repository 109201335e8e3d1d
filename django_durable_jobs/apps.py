from django.apps import AppConfig


class DurableJobsConfig(AppConfig):
    name = "django_durable_jobs"
    verbose_name = "Durable jobs"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from . import checks, conf, registry

        del checks  # registers the system checks on import
        if conf.get("AUTODISCOVER"):
            registry.autodiscover()
