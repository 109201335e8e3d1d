from django.apps import AppConfig
from django.db.models.signals import post_save


class ShopConfig(AppConfig):
    """Customers and orders; a paid order publishes ``order.paid``."""

    name = "example_project.shop"
    label = "shop"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django_durable_jobs import publish_on

        from .models import Order

        # Saving a paid order publishes "order.paid" keyed by its customer, in the
        # same transaction: the onboarding run waiting for that customer resumes.
        publish_on(
            post_save,
            sender=Order,
            event="order.paid",
            key=lambda instance, **kwargs: str(instance.customer_id),
            payload=lambda instance, **kwargs: {
                "order_id": instance.pk,
                "total": str(instance.total),
            },
            when=lambda instance, **kwargs: instance.status == Order.Status.PAID,
        )
