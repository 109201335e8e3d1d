from django.contrib import admin
from django.urls import path

from django_durable_jobs.observe.metrics import metrics_view

urlpatterns = [
    path("admin/", admin.site.urls),
    path("metrics/", metrics_view, name="durable-jobs-metrics"),
]
