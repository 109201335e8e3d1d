from typing import TYPE_CHECKING

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from django_durable_jobs.admin import RelatedRunsMixin, RunsAbout

from .jobs import onboarding
from .models import Customer, Order

# ModelAdmin is generic only in django-stubs; at run time it cannot be subscripted.
if TYPE_CHECKING:
    CustomerModelAdmin = admin.ModelAdmin[Customer]
    OrderModelAdmin = admin.ModelAdmin[Order]
    OrderInlineBase = admin.TabularInline[Order, Customer]
else:
    CustomerModelAdmin = OrderModelAdmin = admin.ModelAdmin
    OrderInlineBase = admin.TabularInline


class OrderInline(OrderInlineBase):
    model = Order
    extra = 0
    fields = ("total", "status", "created_at")
    readonly_fields = ("created_at",)


@admin.register(Customer)
class CustomerAdmin(RelatedRunsMixin, CustomerModelAdmin):
    list_display = ("name", "email", "created_at")
    search_fields = ("name", "email")
    inlines = (OrderInline,)
    actions = ("start_onboarding",)
    # The customer's page lists its onboarding runs (and the receipts of its orders
    # are on each order's page).
    related_runs = (RunsAbout("shop.onboarding", argument="customer_id"),)

    @admin.action(description="Start the onboarding flow")
    def start_onboarding(self, request: HttpRequest, queryset: QuerySet[Customer]) -> None:
        for customer in queryset:
            onboarding.enqueue(customer.pk)
        self.message_user(request, f"Enqueued {queryset.count()} onboarding run(s).")


@admin.register(Order)
class OrderAdmin(RelatedRunsMixin, OrderModelAdmin):
    list_display = ("id", "customer", "total", "status", "created_at")
    list_filter = ("status",)
    search_fields = ("customer__name", "customer__email")
    actions = ("mark_paid",)
    related_runs = (RunsAbout("shop.receipt", argument="order_id"),)

    @admin.action(description="Mark as paid (publishes order.paid)")
    def mark_paid(self, request: HttpRequest, queryset: QuerySet[Order]) -> None:
        count = 0
        for order in queryset.exclude(status=Order.Status.PAID):
            order.status = Order.Status.PAID
            order.save()  # post_save -> publish_on -> "order.paid"
            count += 1
        self.message_user(request, f"{count} order(s) paid.", messages.SUCCESS)
